// trainbox run --dashboard in a build without cpp-httplib: the option is refused, nothing else changes.
#include <trainbox/dashboard/dashboard.h>
#include <trainbox/util/errors.h>

namespace trainbox::dashboard {

struct Dashboard::Impl {};

Dashboard::Dashboard(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Dashboard::~Dashboard() = default;

std::unique_ptr<Dashboard> Dashboard::start(const DashboardConfig&, const std::string&) {
  throw UsageError("--dashboard: this trainbox was built without cpp-httplib",
                   "apt-get install libcpp-httplib-dev and rebuild, or drop --dashboard");
}
std::unique_ptr<Dashboard> Dashboard::serve_runs(const DashboardConfig&, std::vector<std::string>) {
  throw UsageError("trainbox dash: this trainbox was built without cpp-httplib",
                   "apt-get install libcpp-httplib-dev and rebuild");
}
void Dashboard::publish(DashboardInput) {}
int Dashboard::port() const { return -1; }
std::string Dashboard::url() const { return ""; }

}  // namespace trainbox::dashboard
