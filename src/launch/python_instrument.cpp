// Zero-code instrumentation of Python workers (docs/python.md): the launcher's one addition to a
// Python worker's environment. The work happens in python/trainbox/_boot/sitecustomize.py.
#include <trainbox/launch/run_config.h>

#include <filesystem>
#include <system_error>

#include <trainbox/util/strings.h>

namespace trainbox::launch {

namespace fs = std::filesystem;

bool is_python_command(const std::vector<std::string>& command) {
  if (command.empty()) return false;
  const std::string name = fs::path(command.front()).filename().string();
  if (!starts_with(name, "python")) return false;
  for (char ch : name.substr(6))  // python, python3, python3.11
    if (!(std::isdigit(static_cast<unsigned char>(ch)) || ch == '.')) return false;
  return true;
}

std::string find_python_boot(const std::string& self_dir) {
  std::error_code ec;
  auto boot_in = [&](const fs::path& pkg_parent) -> std::string {
    const fs::path b = pkg_parent / "trainbox" / "_boot";
    return fs::is_regular_file(b / "sitecustomize.py", ec) ? fs::weakly_canonical(b, ec).string() : std::string();
  };
  if (!self_dir.empty()) {
    const fs::path prefix = fs::path(self_dir).parent_path();
    // cmake --install: <prefix>/bin/trainbox, <prefix>/share/trainbox/python/trainbox
    if (auto b = boot_in(prefix / "share" / "trainbox" / "python"); !b.empty()) return b;
    // pip: <venv>/bin/trainbox, <venv>/lib/pythonX.Y/site-packages/trainbox
    for (const auto& e : fs::directory_iterator(prefix / "lib", ec))
      if (starts_with(e.path().filename().string(), "python"))
        if (auto b = boot_in(e.path() / "site-packages"); !b.empty()) return b;
  }
#ifdef TRAINBOX_PYTHON_SOURCE_DIR
  return boot_in(TRAINBOX_PYTHON_SOURCE_DIR);  // a build tree: the checkout's python/
#else
  return {};
#endif
}

void add_python_instrumentation(const RunConfig& cfg, const EnvLookup& env,
                                std::vector<std::pair<std::string, std::string>>& out) {
  if (cfg.python_boot.empty() || !is_python_command(cfg.command)) return;
  const std::string old = env("PYTHONPATH").value_or("");
  out.emplace_back("PYTHONPATH", old.empty() ? cfg.python_boot : cfg.python_boot + ":" + old);
  out.emplace_back("TRAINBOX_INSTRUMENT", "1");
}

}  // namespace trainbox::launch
