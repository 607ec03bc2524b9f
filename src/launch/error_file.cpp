#include <trainbox/launch/error_file.h>

#include <nlohmann/json.hpp>

#include <trainbox/util/parse.h>
#include <trainbox/util/strings.h>

namespace trainbox::launch {

namespace {
std::int64_t as_seconds(const nlohmann::json& j) {
  if (j.is_number_integer()) return j.get<std::int64_t>();
  if (j.is_number()) return static_cast<std::int64_t>(j.get<double>());
  if (j.is_string()) return parse_integer(j.get<std::string>()).value_or(0);
  return 0;
}
}  // namespace

std::optional<WorkerError> read_error_file(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::nullopt;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("message")) return std::nullopt;
  WorkerError e;
  const auto& m = j["message"];
  if (m.is_string()) {  // the older flat form
    e.message = m.get<std::string>();
    if (j.contains("timestamp")) e.timestamp = as_seconds(j["timestamp"]);
    return e;
  }
  if (!m.is_object()) return std::nullopt;
  if (m.contains("message") && m["message"].is_string())
    e.message = m["message"].get<std::string>();
  else
    e.message = m.dump();
  if (m.contains("extraInfo") && m["extraInfo"].is_object()) {
    const auto& x = m["extraInfo"];
    if (x.contains("py_callstack") && x["py_callstack"].is_string()) e.traceback = x["py_callstack"].get<std::string>();
    if (x.contains("timestamp")) e.timestamp = as_seconds(x["timestamp"]);
  }
  return e;
}

}  // namespace trainbox::launch
