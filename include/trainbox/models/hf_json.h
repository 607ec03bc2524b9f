// trainbox/models/hf_json.h — reading a Hugging Face config.json: the helpers every family's reader shares.
// transformers writes nulls for unset keys ("attention_bias": null, "torch_dtype": null): each
// helper takes a null as absent. A value of the wrong type is a DataError naming the file and key.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <trainbox/util/errors.h>

namespace trainbox::models::hf {

using nlohmann::json;

inline json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw DataError(fmt::format("{} is missing", path),
                    "model.init_from must be a Hugging Face model folder (config.json and *.safetensors)");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw DataError(fmt::format("{} is not JSON: {}", path, e.what()), "restore the file from the model's source");
  }
}

// A key the family does not implement: one line naming it, what is supported, the fix.
[[noreturn]] inline void unsupported(const std::string& file, const std::string& what, const std::string& supported,
                                     const std::string& family) {
  throw ConfigError(fmt::format("{}: {} is not supported by trainbox's {} family", file, what, family),
                    fmt::format("{}; README.md, \"Not supported yet\", lists the rest", supported));
}

// A key's value, or `fallback` when the key is absent or null.
template <class T>
T value_or(const json& j, const char* key, T fallback) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    throw DataError(
        fmt::format("config.json: \"{}\" is {}, which is not the type transformers writes there", key, j[key].dump()),
        "restore config.json from the model's source");
  }
}

inline std::int64_t int_of(const json& j, const char* key, std::int64_t fallback, const std::string& file) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer())
    throw DataError(fmt::format("{}: \"{}\" is {}, not an integer", file, key, j[key].dump()),
                    "restore config.json from the model's source");
  return j[key].get<std::int64_t>();
}

inline double real_of(const json& j, const char* key, double fallback, const std::string& file) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number())
    throw DataError(fmt::format("{}: \"{}\" is {}, not a number", file, key, j[key].dump()),
                    "restore config.json from the model's source");
  return j[key].get<double>();
}

// config.json's "architectures"[0], or "" when it has none.
inline std::string architecture(const json& j) {
  if (j.is_object() && j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    return j["architectures"][0].get<std::string>();
  return {};
}

}  // namespace trainbox::models::hf
