// src/env/json_fields.h — to_json / from_json for a plain struct, from one list of its fields.
//
// Why not NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT: it defines the pair `inline`, and a
// function that a public header declares (report.h, preflight.h, link_test.h) but one .cpp
// defines inline is not emitted for the other translation units that call it. This is the
// same expansion (nlohmann's own helper macros, JSON 3.11+) without `inline`. The JSON has one
// key per field, named as the field; keys missing from it keep the struct's defaults, so older
// and hand-written files still read.
//
//   TRAINBOX_JSON_FIELDS(LinkMeasurement, node_a, node_b, host_a, host_b, gbytes_per_s)
#pragma once
#include <nlohmann/json.hpp>

// NOLINTBEGIN(cppcoreguidelines-macro-usage): a field list needs the preprocessor's #field
#define TRAINBOX_JSON_FIELDS(Type, ...)                                                     \
  void to_json(nlohmann::json& nlohmann_json_j, const Type& nlohmann_json_t) {              \
    nlohmann_json_j = nlohmann::json::object();                                             \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(NLOHMANN_JSON_TO, __VA_ARGS__))                \
  }                                                                                         \
  void from_json(const nlohmann::json& nlohmann_json_j, Type& nlohmann_json_t) {            \
    const Type nlohmann_json_default_obj{};                                                 \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(NLOHMANN_JSON_FROM_WITH_DEFAULT, __VA_ARGS__)) \
  }
// NOLINTEND(cppcoreguidelines-macro-usage)
