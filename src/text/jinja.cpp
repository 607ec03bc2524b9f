// The Jinja engine of chat templates (trainbox/text/jinja.h): a lexer with jinja2's whitespace
// rules (trim_blocks, lstrip_blocks, `-`/`+` markers), a recursive-descent parser with jinja2's
// precedence, and a tree-walking renderer with Python's value semantics (str(), ==, truthiness,
// code-point strings, json.dumps for tojson). Written here because no C++ Jinja engine is packaged
// in Debian and the renderer must also report the byte spans of {% generation %} blocks.
#include <trainbox/text/jinja.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>

#include <utf8proc.h>

#include "parts.h"

namespace trainbox::text {

namespace {

using ojson = nlohmann::ordered_json;

// ---------------------------------------------------------------- values (Python's) ----------
struct Value;
using List = std::vector<Value>;
struct Dict;
struct Call;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Fn = std::function<Value(List&, Kwargs&, int line)>;

enum class T { Undefined, None, Bool, Int, Float, Str, Arr, Map, Func };

struct Value {
  T t = T::Undefined;
  bool b = false;
  std::int64_t i = 0;
  double f = 0;
  std::string s;  // Str; for Undefined, the name that was not found
  std::shared_ptr<List> l;
  std::shared_ptr<Dict> d;
  std::shared_ptr<Fn> fn;
  bool ns = false;     // a namespace(): its attributes may be assigned
  bool tuple = false;  // an Arr written (a, b) or made by items(): str() prints it as Python does

  static Value undefined(std::string name = {}) {
    Value v;
    v.s = std::move(name);
    return v;
  }
  static Value none() { return make(T::None); }
  static Value boolean(bool x) {
    Value v = make(T::Bool);
    v.b = x;
    return v;
  }
  static Value integer(std::int64_t x) {
    Value v = make(T::Int);
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v = make(T::Float);
    v.f = x;
    return v;
  }
  static Value str(std::string x) {
    Value v = make(T::Str);
    v.s = std::move(x);
    return v;
  }
  static Value list(List x) {
    Value v = make(T::Arr);
    v.l = std::make_shared<List>(std::move(x));
    return v;
  }
  static Value dict(Dict x);
  static Value func(Fn f) {
    Value v = make(T::Func);
    v.fn = std::make_shared<Fn>(std::move(f));
    return v;
  }
  static Value make(T t) {
    Value v;
    v.t = t;
    return v;
  }
  bool is_num() const { return t == T::Int || t == T::Float || t == T::Bool; }
  double num() const { return t == T::Float ? f : t == T::Bool ? (b ? 1 : 0) : static_cast<double>(i); }
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view k) const {
    for (const auto& [key, v] : items)
      if (key == k) return &v;
    return nullptr;
  }
  void set(const std::string& k, Value v) {
    for (auto& [key, old] : items)
      if (key == k) {
        old = std::move(v);
        return;
      }
    items.emplace_back(k, std::move(v));
  }
};

Value Value::dict(Dict x) {
  Value v = make(T::Map);
  v.d = std::make_shared<Dict>(std::move(x));
  return v;
}

Value from_json(const ojson& j) {
  switch (j.type()) {
    case ojson::value_t::null: return Value::none();
    case ojson::value_t::boolean: return Value::boolean(j.get<bool>());
    case ojson::value_t::number_integer: return Value::integer(j.get<std::int64_t>());
    case ojson::value_t::number_unsigned: return Value::integer(static_cast<std::int64_t>(j.get<std::uint64_t>()));
    case ojson::value_t::number_float: return Value::real(j.get<double>());
    case ojson::value_t::string: return Value::str(j.get<std::string>());
    case ojson::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e));
      return Value::list(std::move(l));
    }
    case ojson::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) d.items.emplace_back(k, from_json(e));
      return Value::dict(std::move(d));
    }
    default: return Value::none();
  }
}

// --- code points (Python strings index and measure by code point) ---
std::vector<char32_t> chars_of(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    int n = 1;
    out.push_back(uni::next(s, i, &n));
    i += static_cast<std::size_t>(n);
  }
  return out;
}
std::string from_chars(const std::vector<char32_t>& cs, std::size_t a, std::size_t b) {
  std::string out;
  for (std::size_t k = a; k < b; ++k) uni::append(out, cs[k]);
  return out;
}
bool py_space(char32_t c) {  // str.isspace
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}
std::string map_case(std::string_view s, bool upper) {
  std::string out;
  for (const char32_t c : chars_of(s))
    uni::append(out, static_cast<char32_t>(upper ? utf8proc_toupper(static_cast<utf8proc_int32_t>(c))
                                                 : utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  return out;
}
std::string py_strip(std::string_view s, const Value* chars, bool left, bool right) {
  const auto cs = chars_of(s);
  std::vector<char32_t> set;
  const bool ws = chars == nullptr || chars->t == T::None || chars->t == T::Undefined;
  if (!ws) set = chars_of(chars->s);
  const auto strip = [&](char32_t c) { return ws ? py_space(c) : std::find(set.begin(), set.end(), c) != set.end(); };
  std::size_t a = 0, b = cs.size();
  if (left)
    while (a < b && strip(cs[a])) ++a;
  if (right)
    while (b > a && strip(cs[b - 1])) --b;
  return from_chars(cs, a, b);
}

// Python's float repr: shortest round-trip digits, fixed for 1e-4 <= |x| < 1e16, else d.ddde±XX.
std::string py_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const auto e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  bool neg = false;
  if (!mant.empty() && mant[0] == '-') {
    neg = true;
    mant.erase(0, 1);
  }
  std::string digits;
  for (const char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -5 && exp < 16) {  // repr switches to exponent below 1e-4 (exp -5) and from 1e16
    if (exp < -4) {
      // fall through to exponent form below
    } else if (exp < 0) {
      out = "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<std::size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out =
          digits.substr(0, static_cast<std::size_t>(exp + 1)) + "." + digits.substr(static_cast<std::size_t>(exp + 1));
    }
  }
  if (out.empty()) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return neg ? "-" + out : out;
}

std::string repr(const Value& v);
std::string to_str(const Value& v) {  // Python str()
  switch (v.t) {
    case T::Undefined: return "";
    case T::None: return "None";
    case T::Bool: return v.b ? "True" : "False";
    case T::Int: return std::to_string(v.i);
    case T::Float: return py_float(v.f);
    case T::Str: return v.s;
    case T::Arr: {
      std::string out = v.tuple ? "(" : "[";
      for (std::size_t k = 0; k < v.l->size(); ++k) out += (k ? ", " : "") + repr((*v.l)[k]);
      if (v.tuple && v.l->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case T::Map: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, e] : v.d->items) {
        out += (first ? "" : ", ") + repr(Value::str(k)) + ": " + repr(e);
        first = false;
      }
      return out + "}";
    }
    case T::Func: return v.ns ? "<Namespace>" : "<function>";
  }
  return "";
}
std::string repr(const Value& v) {
  if (v.t != T::Str) return to_str(v);
  const bool dq = v.s.find('\'') != std::string::npos && v.s.find('"') == std::string::npos;
  std::string out(1, dq ? '"' : '\'');
  for (const char c : v.s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\'' && !dq)
      out += "\\'";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned char>(c));
      out += b;
    } else
      out += c;
  }
  return out + (dq ? '"' : '\'');
}

bool truthy(const Value& v) {
  switch (v.t) {
    case T::Undefined:
    case T::None: return false;
    case T::Bool: return v.b;
    case T::Int: return v.i != 0;
    case T::Float: return v.f != 0;
    case T::Str: return !v.s.empty();
    case T::Arr: return !v.l->empty();
    case T::Map: return !v.d->items.empty();
    case T::Func: return true;
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  if (a.is_num() && b.is_num()) {
    if (a.t == T::Float || b.t == T::Float) return a.num() == b.num();
    return (a.t == T::Bool ? (a.b ? 1 : 0) : a.i) == (b.t == T::Bool ? (b.b ? 1 : 0) : b.i);
  }
  if (a.t != b.t) return false;
  switch (a.t) {
    case T::Undefined:
    case T::None: return true;
    case T::Str: return a.s == b.s;
    case T::Arr:
      if (a.l->size() != b.l->size()) return false;
      for (std::size_t k = 0; k < a.l->size(); ++k)
        if (!equal((*a.l)[k], (*b.l)[k])) return false;
      return true;
    case T::Map:
      if (a.d->items.size() != b.d->items.size()) return false;
      for (const auto& [k, e] : a.d->items) {
        const Value* o = b.d->find(k);
        if (o == nullptr || !equal(e, *o)) return false;
      }
      return true;
    case T::Func: return a.fn == b.fn;
    default: return false;
  }
}

const char* type_name(const Value& v) {
  switch (v.t) {
    case T::Undefined: return "undefined";
    case T::None: return "None";
    case T::Bool: return "bool";
    case T::Int: return "int";
    case T::Float: return "float";
    case T::Str: return "str";
    case T::Arr: return "list";
    case T::Map: return "dict";
    case T::Func: return "function";
  }
  return "?";
}

// ---------------------------------------------------------------- the renderer's state -------
struct Frame {
  std::unordered_map<std::string, Value> vars;
  Frame* parent = nullptr;
  const Value* find(const std::string& k) const {
    for (const Frame* f = this; f != nullptr; f = f->parent) {
      const auto it = f->vars.find(k);
      if (it != f->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

struct Ctx {
  std::string out;
  std::vector<std::pair<std::size_t, std::size_t>> generation;
  const std::string* name = nullptr;
  Frame* root = nullptr;
  int depth = 0;
};

[[noreturn]] void fail(const Ctx& c, int line, const std::string& what, std::string raised = {}) {
  throw TemplateError(*c.name + " line " + std::to_string(line) + ": " + what, std::move(raised));
}

// ---------------------------------------------------------------- the tree -------------------
enum class Flow { Normal, Break, Continue };

struct Expr {
  int line = 0;
  virtual ~Expr() = default;
  virtual Value eval(Ctx& c, Frame& f) const = 0;
};
using ExprP = std::unique_ptr<Expr>;

struct Stmt {
  int line = 0;
  virtual ~Stmt() = default;
  virtual Flow exec(Ctx& c, Frame& f) const = 0;
};
using StmtP = std::unique_ptr<Stmt>;
using Body = std::vector<StmtP>;

Flow run_body(const Body& body, Ctx& c, Frame& f) {
  for (const auto& s : body) {
    const Flow fl = s->exec(c, f);
    if (fl != Flow::Normal) return fl;
  }
  return Flow::Normal;
}

// Arguments of a call, matched to parameter names with defaults (Python's rules, simplified).
struct Args {
  List pos;
  Kwargs kw;
  const Value* get(std::size_t idx, std::string_view name) const {
    for (const auto& [k, v] : kw)
      if (k == name) return &v;
    return idx < pos.size() ? &pos[idx] : nullptr;
  }
};

// Iteration over a value, as Python's iter(): lists, dict keys, string characters; undefined is
// empty (jinja2's Undefined iterates as nothing).
List iterate(const Ctx& c, int line, const Value& v) {
  switch (v.t) {
    case T::Undefined: return {};
    case T::Arr: return *v.l;
    case T::Map: {
      List out;
      for (const auto& [k, e] : v.d->items) out.push_back(Value::str(k));
      return out;
    }
    case T::Str: {
      List out;
      for (const char32_t ch : chars_of(v.s)) {
        std::string s;
        uni::append(s, ch);
        out.push_back(Value::str(s));
      }
      return out;
    }
    default: fail(c, line, std::string("'") + type_name(v) + "' object is not iterable");
  }
}

std::int64_t length(const Ctx& c, int line, const Value& v) {
  switch (v.t) {
    case T::Undefined: return 0;
    case T::Str: return static_cast<std::int64_t>(chars_of(v.s).size());
    case T::Arr: return static_cast<std::int64_t>(v.l->size());
    case T::Map: return static_cast<std::int64_t>(v.d->items.size());
    default: fail(c, line, std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

int compare(const Ctx& c, int line, const Value& a, const Value& b) {  // <0, 0, >0
  if (a.is_num() && b.is_num()) return a.num() < b.num() ? -1 : a.num() > b.num() ? 1 : 0;
  if (a.t == T::Str && b.t == T::Str) return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;  // UTF-8 order = code point order
  if (a.t == T::Arr && b.t == T::Arr) {
    for (std::size_t k = 0; k < std::min(a.l->size(), b.l->size()); ++k) {
      if (equal((*a.l)[k], (*b.l)[k])) continue;
      return compare(c, line, (*a.l)[k], (*b.l)[k]);
    }
    return a.l->size() < b.l->size() ? -1 : a.l->size() > b.l->size() ? 1 : 0;
  }
  fail(c, line, std::string("cannot compare '") + type_name(a) + "' with '" + type_name(b) + "'");
}

bool contains(const Ctx& c, int line, const Value& hay, const Value& needle) {
  switch (hay.t) {
    case T::Undefined: return false;
    case T::Str:
      if (needle.t != T::Str) fail(c, line, "'in <string>' requires a string on the left");
      return hay.s.find(needle.s) != std::string::npos;
    case T::Arr:
      for (const auto& e : *hay.l)
        if (equal(e, needle)) return true;
      return false;
    case T::Map: return needle.t == T::Str && hay.d->find(needle.s) != nullptr;
    default: fail(c, line, std::string("argument of type '") + type_name(hay) + "' is not iterable");
  }
}

// json.dumps(x, ensure_ascii=False, indent, separators, sort_keys) — transformers' tojson.
void dump_json(const Ctx& c, int line, const Value& v, std::string& out, int indent, int level,
               const std::string& item_sep, const std::string& key_sep, bool sort_keys) {
  const auto newline = [&](int lv) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent * lv), ' ');
  };
  switch (v.t) {
    case T::None: out += "null"; return;
    case T::Bool: out += v.b ? "true" : "false"; return;
    case T::Int: out += std::to_string(v.i); return;
    case T::Float:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity") : py_float(v.f);
      return;
    case T::Str: {
      out += '"';
      for (const char ch : v.s) {
        const auto u = static_cast<unsigned char>(ch);
        if (ch == '"')
          out += "\\\"";
        else if (ch == '\\')
          out += "\\\\";
        else if (ch == '\n')
          out += "\\n";
        else if (ch == '\r')
          out += "\\r";
        else if (ch == '\t')
          out += "\\t";
        else if (ch == '\b')
          out += "\\b";
        else if (ch == '\f')
          out += "\\f";
        else if (u < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", u);
          out += b;
        } else
          out += ch;
      }
      out += '"';
      return;
    }
    case T::Arr: {
      if (v.l->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t k = 0; k < v.l->size(); ++k) {
        if (k) out += item_sep;
        if (indent >= 0) newline(level + 1);
        dump_json(c, line, (*v.l)[k], out, indent, level + 1, item_sep, key_sep, sort_keys);
      }
      if (indent >= 0) newline(level);
      out += ']';
      return;
    }
    case T::Map: {
      if (v.d->items.empty()) {
        out += "{}";
        return;
      }
      auto items = v.d->items;
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      out += '{';
      bool first = true;
      for (const auto& [k, e] : items) {
        if (!first) out += item_sep;
        first = false;
        if (indent >= 0) newline(level + 1);
        dump_json(c, line, Value::str(k), out, indent, level + 1, item_sep, key_sep, sort_keys);
        out += key_sep;
        dump_json(c, line, e, out, indent, level + 1, item_sep, key_sep, sort_keys);
      }
      if (indent >= 0) newline(level);
      out += '}';
      return;
    }
    default: fail(c, line, std::string("Object of type ") + type_name(v) + " is not JSON serializable");
  }
}

// Python slicing semantics for a sequence of n elements.
std::vector<std::size_t> slice_indices(const Ctx& c, int line, std::int64_t n, const Value& a, const Value& b,
                                       const Value& st) {
  const auto as_int = [&](const Value& v, std::int64_t dflt) -> std::int64_t {
    if (v.t == T::Undefined || v.t == T::None) return dflt;
    if (v.t != T::Int && v.t != T::Bool) fail(c, line, "slice indices must be integers");
    return v.t == T::Bool ? v.b : v.i;
  };
  const std::int64_t step = as_int(st, 1);
  if (step == 0) fail(c, line, "slice step cannot be zero");
  const auto clamp = [&](std::int64_t x, bool start) {
    if (x < 0) x += n;
    if (step > 0) return std::clamp<std::int64_t>(x, 0, n);
    (void)start;
    return std::clamp<std::int64_t>(x, -1, n - 1);
  };
  std::int64_t lo = (a.t == T::Undefined || a.t == T::None) ? (step > 0 ? 0 : n - 1) : clamp(as_int(a, 0), true);
  std::int64_t hi = (b.t == T::Undefined || b.t == T::None) ? (step > 0 ? n : -1) : clamp(as_int(b, 0), false);
  std::vector<std::size_t> out;
  for (std::int64_t k = lo; step > 0 ? k < hi : k > hi; k += step) out.push_back(static_cast<std::size_t>(k));
  return out;
}

Value get_item(const Ctx& c, int line, const Value& obj, const Value& key);
Value get_attr(const Ctx& c, int line, const Value& obj, const std::string& name);

// --- filters and tests ---
Value call_filter(Ctx& c, int line, const std::string& name, const Value& v, const Args& a);
bool call_test(Ctx& c, int line, const std::string& name, const Value& v, const Args& a);

// ---------------------------------------------------------------- expressions ----------------
struct Literal : Expr {
  Value v;
  Value eval(Ctx&, Frame&) const override { return v; }
};
struct Name : Expr {
  std::string name;
  Value eval(Ctx&, Frame& f) const override {
    const Value* v = f.find(name);
    return v != nullptr ? *v : Value::undefined(name);
  }
};
Value pair(std::string k, Value v) {
  Value t = Value::list({Value::str(std::move(k)), std::move(v)});
  t.tuple = true;
  return t;
}
struct ListExpr : Expr {
  std::vector<ExprP> items;
  bool tuple = false;
  Value eval(Ctx& c, Frame& f) const override {
    List l;
    for (const auto& e : items) l.push_back(e->eval(c, f));
    Value v = Value::list(std::move(l));
    v.tuple = tuple;
    return v;
  }
};
struct DictExpr : Expr {
  std::vector<std::pair<ExprP, ExprP>> items;
  Value eval(Ctx& c, Frame& f) const override {
    Dict d;
    for (const auto& [k, e] : items) {
      const Value key = k->eval(c, f);
      if (key.t != T::Str) fail(c, line, std::string("dict keys must be strings here, not ") + type_name(key));
      d.set(key.s, e->eval(c, f));
    }
    return Value::dict(std::move(d));
  }
};
struct Attr : Expr {
  ExprP obj;
  std::string name;
  Value eval(Ctx& c, Frame& f) const override { return get_attr(c, line, obj->eval(c, f), name); }
};
struct Item : Expr {
  ExprP obj, key;
  Value eval(Ctx& c, Frame& f) const override { return get_item(c, line, obj->eval(c, f), key->eval(c, f)); }
};
struct SliceExpr : Expr {
  ExprP obj, a, b, step;  // any may be null
  Value eval(Ctx& c, Frame& f) const override {
    const Value o = obj->eval(c, f);
    const Value va = a ? a->eval(c, f) : Value::none(), vb = b ? b->eval(c, f) : Value::none(),
                vs = step ? step->eval(c, f) : Value::none();
    if (o.t == T::Arr) {
      List out;
      for (const auto k : slice_indices(c, line, static_cast<std::int64_t>(o.l->size()), va, vb, vs))
        out.push_back((*o.l)[k]);
      return Value::list(std::move(out));
    }
    if (o.t == T::Str) {
      const auto cs = chars_of(o.s);
      std::string out;
      for (const auto k : slice_indices(c, line, static_cast<std::int64_t>(cs.size()), va, vb, vs))
        uni::append(out, cs[k]);
      return Value::str(out);
    }
    if (o.t == T::Undefined) fail(c, line, "'" + o.s + "' is undefined");
    fail(c, line, std::string("'") + type_name(o) + "' object is not subscriptable");
  }
};
struct CallArgs {
  std::vector<ExprP> pos;
  std::vector<std::pair<std::string, ExprP>> kw;
  Args eval(Ctx& c, Frame& f) const {
    Args a;
    for (const auto& e : pos) a.pos.push_back(e->eval(c, f));
    for (const auto& [k, e] : kw) a.kw.emplace_back(k, e->eval(c, f));
    return a;
  }
};
struct CallExpr : Expr {
  ExprP callee;
  CallArgs args;
  Value eval(Ctx& c, Frame& f) const override {
    const Value fn = callee->eval(c, f);
    if (fn.t == T::Undefined) fail(c, line, "'" + fn.s + "' is undefined (not a function this engine knows)");
    if (fn.t != T::Func || fn.ns) fail(c, line, std::string("'") + type_name(fn) + "' object is not callable");
    Args a = args.eval(c, f);
    return (*fn.fn)(a.pos, a.kw, line);
  }
};
struct FilterExpr : Expr {
  ExprP obj;
  std::string name;
  CallArgs args;
  Value eval(Ctx& c, Frame& f) const override {
    const Value v = obj->eval(c, f);
    return call_filter(c, line, name, v, args.eval(c, f));
  }
};
struct TestExpr : Expr {
  ExprP obj;
  std::string name;
  CallArgs args;
  bool negated = false;
  Value eval(Ctx& c, Frame& f) const override {
    const Value v = obj->eval(c, f);
    return Value::boolean(call_test(c, line, name, v, args.eval(c, f)) != negated);
  }
};
struct CondExpr : Expr {
  ExprP then, cond, otherwise;  // otherwise may be null: undefined
  Value eval(Ctx& c, Frame& f) const override {
    if (truthy(cond->eval(c, f))) return then->eval(c, f);
    return otherwise ? otherwise->eval(c, f) : Value::undefined();
  }
};
struct AndOr : Expr {
  ExprP a, b;
  bool is_and = true;
  Value eval(Ctx& c, Frame& f) const override {  // Python: returns an operand, not a bool
    Value x = a->eval(c, f);
    if (is_and ? !truthy(x) : truthy(x)) return x;
    return b->eval(c, f);
  }
};
struct NotExpr : Expr {
  ExprP a;
  Value eval(Ctx& c, Frame& f) const override { return Value::boolean(!truthy(a->eval(c, f))); }
};
struct Compare : Expr {
  ExprP first;
  std::vector<std::pair<std::string, ExprP>> rest;
  Value eval(Ctx& c, Frame& f) const override {
    Value x = first->eval(c, f);
    for (const auto& [op, e] : rest) {
      Value y = e->eval(c, f);
      bool r = false;
      if (op == "==")
        r = equal(x, y);
      else if (op == "!=")
        r = !equal(x, y);
      else if (op == "in")
        r = contains(c, line, y, x);
      else if (op == "notin")
        r = !contains(c, line, y, x);
      else {
        const int k = compare(c, line, x, y);
        r = op == "<" ? k < 0 : op == "<=" ? k <= 0 : op == ">" ? k > 0 : k >= 0;
      }
      if (!r) return Value::boolean(false);
      x = std::move(y);
    }
    return Value::boolean(true);
  }
};
struct Unary : Expr {
  char op = '-';
  ExprP a;
  Value eval(Ctx& c, Frame& f) const override {
    const Value x = a->eval(c, f);
    if (!x.is_num()) fail(c, line, std::string("bad operand type for unary ") + op + ": '" + type_name(x) + "'");
    if (op == '+') return x.t == T::Float ? x : Value::integer(x.t == T::Bool ? x.b : x.i);
    return x.t == T::Float ? Value::real(-x.f) : Value::integer(-(x.t == T::Bool ? x.b : x.i));
  }
};
std::int64_t ival(const Value& v) { return v.t == T::Bool ? (v.b ? 1 : 0) : v.i; }
struct Binary : Expr {
  std::string op;
  ExprP a, b;
  Value eval(Ctx& c, Frame& f) const override {
    const Value x = a->eval(c, f), y = b->eval(c, f);
    if (op == "~") return Value::str(to_str(x) + to_str(y));
    for (const Value* v : {&x, &y})
      if (v->t == T::Undefined) fail(c, line, "'" + v->s + "' is undefined");
    if (op == "+") {
      if (x.t == T::Str && y.t == T::Str) return Value::str(x.s + y.s);
      if (x.t == T::Arr && y.t == T::Arr) {
        List l = *x.l;
        l.insert(l.end(), y.l->begin(), y.l->end());
        return Value::list(std::move(l));
      }
    }
    if (op == "*" && ((x.t == T::Str || x.t == T::Arr) && (y.t == T::Int || y.t == T::Bool))) {
      const std::int64_t n = std::max<std::int64_t>(0, ival(y));
      if (x.t == T::Str) {
        std::string s;
        for (std::int64_t k = 0; k < n; ++k) s += x.s;
        return Value::str(s);
      }
      List l;
      for (std::int64_t k = 0; k < n; ++k) l.insert(l.end(), x.l->begin(), x.l->end());
      return Value::list(std::move(l));
    }
    if (!x.is_num() || !y.is_num())
      fail(c, line,
           std::string("unsupported operand types for ") + op + ": '" + type_name(x) + "' and '" + type_name(y) + "'" +
               (op == "%" && x.t == T::Str ? " (string % formatting is not supported)" : ""));
    const bool flt = x.t == T::Float || y.t == T::Float;
    if (op == "/") {
      if (y.num() == 0) fail(c, line, "division by zero");
      return Value::real(x.num() / y.num());
    }
    if (op == "**") {
      if (!flt && ival(y) >= 0) {
        std::int64_t r = 1;
        for (std::int64_t k = 0; k < ival(y); ++k) r *= ival(x);
        return Value::integer(r);
      }
      return Value::real(std::pow(x.num(), y.num()));
    }
    if (flt) {
      const double p = x.num(), q = y.num();
      if (op == "+") return Value::real(p + q);
      if (op == "-") return Value::real(p - q);
      if (op == "*") return Value::real(p * q);
      if (q == 0) fail(c, line, "division by zero");
      if (op == "//") return Value::real(std::floor(p / q));
      const double m = std::fmod(p, q);
      return Value::real(m != 0 && ((m < 0) != (q < 0)) ? m + q : m);
    }
    const std::int64_t p = ival(x), q = ival(y);
    if (op == "+") return Value::integer(p + q);
    if (op == "-") return Value::integer(p - q);
    if (op == "*") return Value::integer(p * q);
    if (q == 0) fail(c, line, "integer division or modulo by zero");
    std::int64_t d = p / q, m = p % q;
    if (m != 0 && ((m < 0) != (q < 0))) {
      d -= 1;
      m += q;
    }
    return Value::integer(op == "//" ? d : m);
  }
};

// ---------------------------------------------------------------- statements -----------------
struct Output : Stmt {
  std::string text;
  Flow exec(Ctx& c, Frame&) const override {
    c.out += text;
    return Flow::Normal;
  }
};
struct Print : Stmt {
  ExprP e;
  Flow exec(Ctx& c, Frame& f) const override {
    c.out += to_str(e->eval(c, f));
    return Flow::Normal;
  }
};
struct If : Stmt {
  std::vector<std::pair<ExprP, Body>> branches;  // a null condition: else
  Flow exec(Ctx& c, Frame& f) const override {
    for (const auto& [cond, body] : branches)
      if (!cond || truthy(cond->eval(c, f))) return run_body(body, c, f);
    return Flow::Normal;
  }
};

void assign(Ctx& c, int line, Frame& f, const std::vector<std::string>& names, const Value& v) {
  if (names.size() == 1) {
    f.vars[names[0]] = v;
    return;
  }
  const List items = iterate(c, line, v);
  if (items.size() != names.size())
    fail(c, line,
         "cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(names.size()) + " names");
  for (std::size_t k = 0; k < names.size(); ++k) f.vars[names[k]] = items[k];
}

struct For : Stmt {
  std::vector<std::string> targets;
  ExprP iter, filter;
  Body body, otherwise;
  Flow exec(Ctx& c, Frame& f) const override {
    const Value seq = iter->eval(c, f);
    List items = iterate(c, line, seq);
    if (filter) {
      List kept;
      for (const auto& it : items) {
        Frame probe;
        probe.parent = &f;
        assign(c, line, probe, targets, it);
        if (truthy(filter->eval(c, probe))) kept.push_back(it);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      Frame inner;
      inner.parent = &f;
      run_body(otherwise, c, inner);
      return Flow::Normal;
    }
    const auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t k = 0; k < n; ++k) {
      Frame inner;
      inner.parent = &f;
      assign(c, line, inner, targets, items[static_cast<std::size_t>(k)]);
      Dict loop;
      loop.set("index", Value::integer(k + 1));
      loop.set("index0", Value::integer(k));
      loop.set("revindex", Value::integer(n - k));
      loop.set("revindex0", Value::integer(n - k - 1));
      loop.set("first", Value::boolean(k == 0));
      loop.set("last", Value::boolean(k == n - 1));
      loop.set("length", Value::integer(n));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem", k > 0 ? items[static_cast<std::size_t>(k - 1)] : Value::undefined("loop.previtem"));
      loop.set("nextitem", k + 1 < n ? items[static_cast<std::size_t>(k + 1)] : Value::undefined("loop.nextitem"));
      loop.set("cycle", Value::func([k, &c](List& args, Kwargs&, int ln) -> Value {
                 if (args.empty()) fail(c, ln, "loop.cycle() needs at least one value");
                 return args[static_cast<std::size_t>(k) % args.size()];
               }));
      inner.vars["loop"] = Value::dict(std::move(loop));
      if (run_body(body, c, inner) == Flow::Break) break;
    }
    return Flow::Normal;
  }
};

struct Set : Stmt {
  std::vector<std::string> names;  // one name, or a tuple
  ExprP ns;                        // `set ns.attr = …`: the namespace, names[0] the attribute
  ExprP value;                     // null: block set, body captured
  Body body;
  Flow exec(Ctx& c, Frame& f) const override {
    Value v;
    if (value) {
      v = value->eval(c, f);
    } else {
      const std::size_t mark = c.out.size();
      const std::size_t gen_mark = c.generation.size();
      run_body(body, c, f);
      v = Value::str(c.out.substr(mark));
      c.out.resize(mark);
      c.generation.resize(gen_mark);
    }
    if (ns) {
      const Value target = ns->eval(c, f);
      if (!target.ns) fail(c, line, "cannot assign attribute on a non-namespace object (use namespace())");
      target.d->set(names[0], std::move(v));
      return Flow::Normal;
    }
    assign(c, line, f, names, v);
    return Flow::Normal;
  }
};

struct LoopControl : Stmt {
  Flow kind = Flow::Break;
  Flow exec(Ctx&, Frame&) const override { return kind; }
};

struct Generation : Stmt {
  Body body;
  Flow exec(Ctx& c, Frame& f) const override {
    const std::size_t begin = c.out.size();
    const Flow fl = run_body(body, c, f);
    c.generation.emplace_back(begin, c.out.size());
    return fl;
  }
};

struct Macro : Stmt {
  std::string name;
  std::vector<std::pair<std::string, ExprP>> params;  // default may be null
  Body body;
  Flow exec(Ctx& c, Frame& f) const override {
    const Macro* self = this;
    Ctx* cp = &c;
    f.vars[name] = Value::func([self, cp](List& pos, Kwargs& kw, int ln) -> Value {
      Ctx& cc = *cp;
      if (pos.size() > self->params.size())
        fail(cc, ln,
             "macro '" + self->name + "' takes " + std::to_string(self->params.size()) + " arguments, got " +
                 std::to_string(pos.size()));
      if (++cc.depth > 200) fail(cc, ln, "macro recursion deeper than 200");
      Frame frame;
      frame.parent = cc.root;
      for (std::size_t k = 0; k < self->params.size(); ++k) {
        const auto& [pname, dflt] = self->params[k];
        const Value* given = nullptr;
        for (const auto& [kk, vv] : kw)
          if (kk == pname) given = &vv;
        if (k < pos.size())
          frame.vars[pname] = pos[k];
        else if (given != nullptr)
          frame.vars[pname] = *given;
        else if (dflt)
          frame.vars[pname] = dflt->eval(cc, frame);
        else
          frame.vars[pname] = Value::undefined(pname);
      }
      for (const auto& [kk, vv] : kw) {
        bool known = false;
        for (const auto& p : self->params) known = known || p.first == kk;
        if (!known) fail(cc, ln, "macro '" + self->name + "' takes no keyword argument '" + kk + "'");
      }
      const std::size_t mark = cc.out.size();
      const std::size_t gen_mark = cc.generation.size();
      run_body(self->body, cc, frame);
      std::string text = cc.out.substr(mark);
      // A macro's {% generation %} spans move with its text when the caller prints it; that is
      // rare in templates and not tracked: refuse rather than report wrong spans.
      if (cc.generation.size() != gen_mark) fail(cc, ln, "{% generation %} inside a macro is not supported");
      cc.out.resize(mark);
      --cc.depth;
      return Value::str(std::move(text));
    });
    return Flow::Normal;
  }
};

// ---------------------------------------------------------------- attribute/item access ------
// str.split / rsplit / splitlines, with Python's rules (no separator: runs of whitespace).
std::optional<Value> str_split(const Ctx& c, int ln, const std::string& s, const std::string& name, const Args& a) {
  const auto arg = [&](std::size_t k, std::string_view nm) { return a.get(k, nm); };
  const auto need_str = [&](const Value* v, const char* what) -> std::string {
    if (v == nullptr || v->t != T::Str) fail(c, ln, "str." + name + "() needs a string " + what);
    return v->s;
  };
  if (name == "split" || name == "rsplit") {
    const Value* sep = arg(0, "sep");
    const Value* mx = arg(1, "maxsplit");
    std::int64_t maxsplit = (mx != nullptr && mx->t == T::Int) ? mx->i : -1;
    List out;
    if (sep == nullptr || sep->t == T::None) {  // runs of whitespace, no empty pieces
      const auto cs = chars_of(s);
      std::vector<std::pair<std::size_t, std::size_t>> words;
      for (std::size_t k = 0; k < cs.size();) {
        while (k < cs.size() && py_space(cs[k])) ++k;
        if (k == cs.size()) break;
        std::size_t e = k;
        while (e < cs.size() && !py_space(cs[e])) ++e;
        words.emplace_back(k, e);
        k = e;
      }
      if (maxsplit >= 0 && static_cast<std::int64_t>(words.size()) > maxsplit + 1) {
        if (name == "split") {
          std::size_t k = words[static_cast<std::size_t>(maxsplit)].first;
          std::size_t e = cs.size();
          while (e > k && py_space(cs[e - 1])) --e;
          words.resize(static_cast<std::size_t>(maxsplit));
          words.emplace_back(k, e);
        } else {
          const std::size_t keep = words.size() - static_cast<std::size_t>(maxsplit);
          std::size_t k = 0;
          while (k < cs.size() && py_space(cs[k])) ++k;
          std::vector<std::pair<std::size_t, std::size_t>> w2{{k, words[keep - 1].second}};
          w2.insert(w2.end(), words.begin() + static_cast<std::ptrdiff_t>(keep), words.end());
          words = std::move(w2);
        }
      }
      for (const auto& [p, q] : words) out.push_back(Value::str(from_chars(cs, p, q)));
      return Value::list(std::move(out));
    }
    const std::string d = need_str(sep, "separator");
    if (d.empty()) fail(c, ln, "empty separator");
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (std::size_t at; (at = s.find(d, start)) != std::string::npos;) {
      parts.push_back(s.substr(start, at - start));
      start = at + d.size();
    }
    parts.push_back(s.substr(start));
    if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) > maxsplit + 1) {
      const auto m = static_cast<std::size_t>(maxsplit);
      std::vector<std::string> merged;
      if (name == "split") {
        merged.assign(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(m));
        std::string rest = parts[m];
        for (std::size_t k = m + 1; k < parts.size(); ++k) rest += d + parts[k];
        merged.push_back(rest);
      } else {
        const std::size_t head = parts.size() - m;
        std::string first = parts[0];
        for (std::size_t k = 1; k < head; ++k) first += d + parts[k];
        merged.push_back(first);
        merged.insert(merged.end(), parts.begin() + static_cast<std::ptrdiff_t>(head), parts.end());
      }
      parts = std::move(merged);
    }
    for (auto& p : parts) out.push_back(Value::str(std::move(p)));
    return Value::list(std::move(out));
  }
  if (name == "splitlines") {
    List out;
    std::size_t start = 0;
    for (std::size_t k = 0; k < s.size(); ++k) {
      if (s[k] == '\n' || s[k] == '\r') {
        out.push_back(Value::str(s.substr(start, k - start)));
        if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
        start = k + 1;
      }
    }
    if (start < s.size()) out.push_back(Value::str(s.substr(start)));
    return Value::list(std::move(out));
  }
  return std::nullopt;
}

// The other str methods (trainbox/text/jinja.h lists them).
Value str_method(const Ctx& c, int ln, const std::string& s, const std::string& name, const Args& a) {
  const auto arg = [&](std::size_t k, std::string_view nm) { return a.get(k, nm); };
  const auto need_str = [&](const Value* v, const char* what) -> std::string {
    if (v == nullptr || v->t != T::Str) fail(c, ln, "str." + name + "() needs a string " + what);
    return v->s;
  };
  if (name == "startswith" || name == "endswith") {
    const Value* p = arg(0, "prefix");
    List opts = (p != nullptr && p->t == T::Arr) ? *p->l : List{p != nullptr ? *p : Value::undefined()};
    for (const auto& o : opts) {
      const std::string x = need_str(&o, "prefix");
      const bool hit = name == "startswith" ? s.compare(0, x.size(), x) == 0 && s.size() >= x.size()
                                            : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value::str(py_strip(s, arg(0, "chars"), name != "rstrip", name != "lstrip"));
  if (name == "upper" || name == "lower") return Value::str(map_case(s, name == "upper"));
  if (name == "title" || name == "capitalize") {
    std::string out;
    bool prev_cased = false;
    bool first = true;
    for (const char32_t ch : chars_of(s)) {
      const bool alpha = utf8proc_category(static_cast<utf8proc_int32_t>(ch)) <= UTF8PROC_CATEGORY_LO &&
                         utf8proc_category(static_cast<utf8proc_int32_t>(ch)) >= UTF8PROC_CATEGORY_LU;
      const bool up = name == "title" ? !prev_cased : first;
      uni::append(out, static_cast<char32_t>(up ? utf8proc_toupper(static_cast<utf8proc_int32_t>(ch))
                                                : utf8proc_tolower(static_cast<utf8proc_int32_t>(ch))));
      prev_cased = alpha;
      first = false;
    }
    return Value::str(out);
  }
  if (name == "replace") {
    const std::string from = need_str(arg(0, "old"), "to replace"), to = need_str(arg(1, "new"), "replacement");
    const Value* cnt = arg(2, "count");
    std::int64_t left = (cnt != nullptr && cnt->t == T::Int) ? cnt->i : -1;
    std::string out;
    if (from.empty()) fail(c, ln, "str.replace() with an empty string is not supported");
    std::size_t start = 0;
    for (std::size_t at; left != 0 && (at = s.find(from, start)) != std::string::npos; --left) {
      out += s.substr(start, at - start) + to;
      start = at + from.size();
    }
    return Value::str(out + s.substr(start));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    const std::string x = need_str(arg(0, "sub"), "to find");
    if (name == "count") {
      std::int64_t n = 0;
      if (x.empty()) return Value::integer(static_cast<std::int64_t>(chars_of(s).size()) + 1);
      for (std::size_t at = 0; (at = s.find(x, at)) != std::string::npos; at += x.size()) ++n;
      return Value::integer(n);
    }
    const std::size_t at = name == "find" ? s.find(x) : s.rfind(x);
    if (at == std::string::npos) return Value::integer(-1);
    return Value::integer(static_cast<std::int64_t>(chars_of(s.substr(0, at)).size()));
  }
  if (name == "join") {
    const Value* it = arg(0, "iterable");
    std::string out;
    bool first = true;
    for (const auto& e : iterate(c, ln, it != nullptr ? *it : Value::undefined())) {
      if (e.t != T::Str) fail(c, ln, std::string("str.join() expects strings, got ") + type_name(e));
      out += (first ? "" : s) + e.s;
      first = false;
    }
    return Value::str(out);
  }
  // isdigit / isspace / isalpha
  const auto cs = chars_of(s);
  if (cs.empty()) return Value::boolean(false);
  for (const char32_t ch : cs) {
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(ch));
    const bool ok = name == "isspace"   ? py_space(ch)
                    : name == "isdigit" ? cat == UTF8PROC_CATEGORY_ND
                                        : (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO);
    if (!ok) return Value::boolean(false);
  }
  return Value::boolean(true);
}

Value method(const Ctx& c, int line, const Value& obj, const std::string& name) {
  const Ctx* cp = &c;
  if (obj.t == T::Str) {
    static const char* const kStr[] = {"startswith", "endswith", "strip", "lstrip",  "rstrip",     "split",   "rsplit",
                                       "splitlines", "upper",    "lower", "title",   "capitalize", "replace", "find",
                                       "rfind",      "count",    "join",  "isdigit", "isspace",    "isalpha"};
    if (std::find_if(std::begin(kStr), std::end(kStr), [&](const char* m) { return name == m; }) == std::end(kStr))
      return Value::undefined("str." + name);
    const std::string s = obj.s;
    return Value::func([s, name, cp](List& pos, Kwargs& kw, int ln) -> Value {
      const Args a{pos, kw};
      if (auto r = str_split(*cp, ln, s, name, a)) return *r;
      return str_method(*cp, ln, s, name, a);
    });
  }
  if (obj.t == T::Map && !obj.ns) {
    const auto d = obj.d;
    if (name == "items" || name == "keys" || name == "values")
      return Value::func([d, name](List&, Kwargs&, int) -> Value {
        List out;
        for (const auto& [k, v] : d->items)
          out.push_back(name == "keys" ? Value::str(k) : name == "values" ? v : pair(k, v));
        return Value::list(std::move(out));
      });
    if (name == "get")
      return Value::func([d](List& pos, Kwargs& kw, int) -> Value {
        Args a{pos, kw};
        const Value* k = a.get(0, "key");
        const Value* dflt = a.get(1, "default");
        if (k != nullptr && k->t == T::Str)
          if (const Value* v = d->find(k->s)) return *v;
        return dflt != nullptr ? *dflt : Value::none();
      });
  }
  if (obj.t == T::Arr &&
      (name == "append" || name == "pop" || name == "insert" || name == "extend" || name == "remove"))
    fail(c, line,
         "list." + name + "() modifies a list, which transformers' sandboxed jinja2 refuses; use a namespace()");
  return Value::undefined(name);
}

Value get_attr(const Ctx& c, int line, const Value& obj, const std::string& name) {
  if (obj.t == T::Undefined)
    fail(c, line, "'" + (obj.s.empty() ? std::string("value") : obj.s) + "' is undefined (reading ." + name + ")");
  if (obj.t == T::None) fail(c, line, "'None' has no attribute '" + name + "'");
  if (obj.t == T::Map) {
    if (obj.ns) {
      if (const Value* v = obj.d->find(name)) return *v;
      return Value::undefined(name);
    }
    // jinja2 tries the attribute first (dict methods), then the item.
    if (name == "items" || name == "keys" || name == "values" || name == "get") return method(c, line, obj, name);
    if (const Value* v = obj.d->find(name)) return *v;
    return Value::undefined(name);
  }
  Value m = method(c, line, obj, name);
  return m;
}

Value get_item(const Ctx& c, int line, const Value& obj, const Value& key) {
  if (obj.t == T::Undefined)
    fail(c, line,
         "'" + (obj.s.empty() ? std::string("value") : obj.s) + "' is undefined (reading [" + repr(key) + "])");
  if (obj.t == T::Map) {
    if (key.t == T::Str) {
      if (const Value* v = obj.d->find(key.s)) return *v;
      if (!obj.ns) return method(c, line, obj, key.s);
    }
    return Value::undefined(to_str(key));
  }
  if (obj.t == T::Arr || obj.t == T::Str) {
    if (key.t == T::Str) return get_attr(c, line, obj, key.s);
    if (key.t != T::Int && key.t != T::Bool)
      fail(c, line, std::string("indices must be integers, not ") + type_name(key));
    std::int64_t k = ival(key);
    if (obj.t == T::Arr) {
      const auto n = static_cast<std::int64_t>(obj.l->size());
      if (k < 0) k += n;
      if (k < 0 || k >= n) return Value::undefined("index " + std::to_string(ival(key)));
      return (*obj.l)[static_cast<std::size_t>(k)];
    }
    const auto cs = chars_of(obj.s);
    const auto n = static_cast<std::int64_t>(cs.size());
    if (k < 0) k += n;
    if (k < 0 || k >= n) return Value::undefined("index " + std::to_string(ival(key)));
    return Value::str(from_chars(cs, static_cast<std::size_t>(k), static_cast<std::size_t>(k) + 1));
  }
  if (obj.t == T::None) fail(c, line, "'None' is not subscriptable");
  return Value::undefined(to_str(key));
}

// ---------------------------------------------------------------- filters ---------------------
Value attr_path(Ctx& c, int line, const Value& v, const std::string& path) {  // "a.b" or "0"
  Value cur = v;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (cur.t == T::Undefined) return cur;
    cur = digits ? get_item(c, line, cur, Value::integer(std::stoll(part))) : get_item(c, line, cur, Value::str(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.t == T::Str) return Value::str(map_case(v.s, false));
  return v;
}

bool flag_of(const Args& a, std::size_t k, std::string_view nm) {
  const Value* x = a.get(k, nm);
  return x != nullptr && truthy(*x);
}

// Filters of strings and first/last/list/reverse.
std::optional<Value> filter_text(Ctx& c, int line, const std::string& name, const Value& v, const Args& a) {
  const auto arg = [&](std::size_t k, std::string_view nm) { return a.get(k, nm); };
  const auto flag = [&](std::size_t k, std::string_view nm) { return flag_of(a, k, nm); };
  if (name == "safe") return v;
  if (name == "default" || name == "d") {
    const Value* dflt = arg(0, "default_value");
    if (v.t == T::Undefined || (flag(1, "boolean") && !truthy(v))) return dflt != nullptr ? *dflt : Value::str("");
    return v;
  }
  if (name == "trim") return Value::str(py_strip(to_str(v), arg(0, "chars"), true, true));
  if (name == "length" || name == "count") return Value::integer(length(c, line, v));
  if (name == "upper" || name == "lower") return Value::str(map_case(to_str(v), name == "upper"));
  if (name == "capitalize" || name == "title") {
    std::string s = to_str(v);
    List none;
    Kwargs kw;
    return (*method(c, line, Value::str(s), name).fn)(none, kw, line);
  }
  if (name == "string") return Value::str(to_str(v));
  if (name == "escape" || name == "e") return Value::str(html_escape(to_str(v)));
  if (name == "tojson") {
    const Value* ind = arg(0, "indent");
    const Value* seps = arg(1, "separators");
    int indent = -1;
    if (ind != nullptr && ind->t == T::Int) indent = static_cast<int>(ind->i);
    std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
    if (seps != nullptr && seps->t == T::Arr && seps->l->size() == 2) {
      item_sep = to_str((*seps->l)[0]);
      key_sep = to_str((*seps->l)[1]);
    }
    std::string out;
    dump_json(c, line, v, out, indent, 0, item_sep, key_sep, flag(2, "sort_keys"));
    return Value::str(out);
  }
  if (name == "join") {
    const Value* sep = arg(0, "d");
    const Value* attr = arg(1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& e : iterate(c, line, v)) {
      out += (first ? "" : (sep != nullptr ? to_str(*sep) : "")) +
             to_str(attr != nullptr ? attr_path(c, line, e, to_str(*attr)) : e);
      first = false;
    }
    return Value::str(out);
  }
  if (name == "first" || name == "last") {
    const List items = iterate(c, line, v);
    if (items.empty()) return Value::undefined("first of an empty sequence");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::list(iterate(c, line, v));
  if (name == "reverse") {
    if (v.t == T::Str) {
      auto cs = chars_of(v.s);
      std::reverse(cs.begin(), cs.end());
      return Value::str(from_chars(cs, 0, cs.size()));
    }
    List items = iterate(c, line, v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "indent") {
    const Value* w = arg(0, "width");
    const std::string pad = w != nullptr && w->t == T::Str
                                ? w->s
                                : std::string(w != nullptr && w->t == T::Int ? static_cast<std::size_t>(w->i) : 4, ' ');
    const bool first = flag(1, "first"), blank = flag(2, "blank");
    std::string s = to_str(v) + "\n";
    std::vector<std::string> lines;
    List none;
    Kwargs kw;
    for (const auto& l : *(*method(c, line, Value::str(s), "splitlines").fn)(none, kw, line).l) lines.push_back(l.s);
    std::string out;
    for (std::size_t k = 0; k < lines.size(); ++k) {
      if (k) out += "\n";
      out += (k > 0 && (blank || !lines[k].empty()) ? pad : "") + lines[k];
    }
    return Value::str(first ? pad + out : out);
  }
  if (name == "wordcount") {
    List none;
    Kwargs kw;
    return Value::integer(
        static_cast<std::int64_t>((*method(c, line, Value::str(to_str(v)), "split").fn)(none, kw, line).l->size()));
  }
  return std::nullopt;
}

// Filters of numbers, replace, items, dictsort, select/reject.
std::optional<Value> filter_values(Ctx& c, int line, const std::string& name, const Value& v, const Args& a) {
  const auto arg = [&](std::size_t k, std::string_view nm) { return a.get(k, nm); };
  const auto flag = [&](std::size_t k, std::string_view nm) { return flag_of(a, k, nm); };
  if (name == "int" || name == "float") {
    const Value* dflt = arg(0, "default");
    if (v.is_num()) return name == "int" ? Value::integer(static_cast<std::int64_t>(v.num())) : Value::real(v.num());
    if (v.t == T::Str) {
      const std::string s = py_strip(v.s, nullptr, true, true);
      char* end = nullptr;
      const double x = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size())
        return name == "int" ? Value::integer(static_cast<std::int64_t>(x)) : Value::real(x);
    }
    if (dflt != nullptr) return *dflt;
    return name == "int" ? Value::integer(0) : Value::real(0);
  }
  if (name == "abs") {
    if (!v.is_num()) fail(c, line, std::string("abs() of ") + type_name(v));
    return v.t == T::Float ? Value::real(std::fabs(v.f)) : Value::integer(std::llabs(ival(v)));
  }
  if (name == "round") {
    const Value* p = arg(0, "precision");
    const double scale = std::pow(10.0, p != nullptr && p->t == T::Int ? static_cast<double>(p->i) : 0.0);
    if (!v.is_num()) fail(c, line, std::string("round() of ") + type_name(v));
    return Value::real(std::nearbyint(v.num() * scale) / scale);
  }
  if (name == "replace") {
    Kwargs kw;
    List pos;
    for (std::size_t k = 0; k < 3; ++k)
      if (const Value* x = arg(k, k == 0 ? "old" : k == 1 ? "new" : "count")) pos.push_back(*x);
    return (*method(c, line, Value::str(to_str(v)), "replace").fn)(pos, kw, line);
  }
  if (name == "items") {
    if (v.t == T::Undefined) return Value::list({});
    if (v.t != T::Map) fail(c, line, std::string("items filter of ") + type_name(v));
    List out;
    for (const auto& [k, e] : v.d->items) out.push_back(pair(k, e));
    return Value::list(std::move(out));
  }
  if (name == "dictsort") {
    if (v.t != T::Map) fail(c, line, std::string("dictsort of ") + type_name(v));
    const bool cs = flag(0, "case_sensitive");
    const Value* by = arg(1, "by");
    const bool by_value = by != nullptr && to_str(*by) == "value";
    List out;
    for (const auto& [k, e] : v.d->items) out.push_back(pair(k, e));
    std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
      const std::size_t i = by_value ? 1 : 0;
      return compare(c, line, sort_key((*x.l)[i], cs), sort_key((*y.l)[i], cs)) < 0;
    });
    if (flag(2, "reverse")) std::reverse(out.begin(), out.end());
    return Value::list(std::move(out));
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep_if = name == "selectattr" || name == "select";
    const std::size_t t0 = by_attr ? 1 : 0;
    const Value* attr = by_attr ? arg(0, "attribute") : nullptr;
    if (by_attr && attr == nullptr) fail(c, line, name + " needs an attribute name");
    const std::string test = a.pos.size() > t0 ? to_str(a.pos[t0]) : "";
    Args targs;
    for (std::size_t k = t0 + 1; k < a.pos.size(); ++k) targs.pos.push_back(a.pos[k]);
    List out;
    for (const auto& e : iterate(c, line, v)) {
      const Value x = by_attr ? attr_path(c, line, e, to_str(*attr)) : e;
      const bool t = test.empty() ? truthy(x) : call_test(c, line, test, x, targs);
      if (t == keep_if) out.push_back(e);
    }
    return Value::list(std::move(out));
  }
  return std::nullopt;
}

// map, unique, sort, min/max/sum, indent, wordcount.
std::optional<Value> filter_collections(Ctx& c, int line, const std::string& name, const Value& v, const Args& a) {
  const auto arg = [&](std::size_t k, std::string_view nm) { return a.get(k, nm); };
  const auto flag = [&](std::size_t k, std::string_view nm) { return flag_of(a, k, nm); };
  if (name == "map") {
    const Value* attr = nullptr;
    for (const auto& [k, e] : a.kw)
      if (k == "attribute") attr = &e;
    List out;
    if (attr != nullptr) {
      const Value* dflt = nullptr;
      for (const auto& [k, e] : a.kw)
        if (k == "default") dflt = &e;
      for (const auto& e : iterate(c, line, v)) {
        Value x = attr_path(c, line, e, to_str(*attr));
        out.push_back(x.t == T::Undefined && dflt != nullptr ? *dflt : x);
      }
      return Value::list(std::move(out));
    }
    if (a.pos.empty()) fail(c, line, "map needs a filter name or attribute=");
    const std::string f = to_str(a.pos[0]);
    Args fargs;
    fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
    for (const auto& e : iterate(c, line, v)) out.push_back(call_filter(c, line, f, e, fargs));
    return Value::list(std::move(out));
  }
  if (name == "unique" || name == "sort") {
    const bool cs = flag(name == "sort" ? 1 : 0, "case_sensitive");
    const Value* attr = arg(name == "sort" ? 2 : 1, "attribute");
    const auto key = [&](const Value& e) {
      return sort_key(attr != nullptr ? attr_path(c, line, e, to_str(*attr)) : e, cs);
    };
    List items = iterate(c, line, v);
    if (name == "sort") {
      std::stable_sort(items.begin(), items.end(),
                       [&](const Value& x, const Value& y) { return compare(c, line, key(x), key(y)) < 0; });
      if (flag(0, "reverse")) std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    }
    List out, seen;
    for (const auto& e : items) {
      const Value k = key(e);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) {
        seen.push_back(k);
        out.push_back(e);
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "min" || name == "max" || name == "sum") {
    const List items = iterate(c, line, v);
    if (name == "sum") {
      const Value* attr = arg(0, "attribute");
      const Value* start = arg(1, "start");
      Value acc = start != nullptr ? *start : Value::integer(0);
      for (const auto& e : items) {
        Binary add;
        add.op = "+";
        add.line = line;
        auto l = std::make_unique<Literal>();
        l->v = acc;
        auto r = std::make_unique<Literal>();
        r->v = attr != nullptr ? attr_path(c, line, e, to_str(*attr)) : e;
        add.a = std::move(l);
        add.b = std::move(r);
        Frame none;
        acc = add.eval(c, none);
      }
      return acc;
    }
    if (items.empty()) return Value::undefined(name + " of an empty sequence");
    const bool cs = flag(0, "case_sensitive");
    Value best = items[0];
    for (const auto& e : items) {
      const int k = compare(c, line, sort_key(e, cs), sort_key(best, cs));
      if (name == "min" ? k < 0 : k > 0) best = e;
    }
    return best;
  }
  return std::nullopt;
}

Value call_filter(Ctx& c, int line, const std::string& name, const Value& v, const Args& a) {
  for (auto* f : {filter_text, filter_values, filter_collections})
    if (auto r = f(c, line, name, v, a)) return *r;
  fail(c, line, "unknown filter '" + name + "'");
}

bool call_test(Ctx& c, int line, const std::string& name, const Value& v, const Args& a) {
  const Value* x = a.get(0, "value");
  const auto other = [&]() -> const Value& {
    if (x == nullptr) fail(c, line, "test '" + name + "' needs a value to compare with");
    return *x;
  };
  if (name == "defined") return v.t != T::Undefined;
  if (name == "undefined") return v.t == T::Undefined;
  if (name == "none") return v.t == T::None;
  if (name == "string") return v.t == T::Str;
  if (name == "number") return v.is_num();
  if (name == "integer") return v.t == T::Int;
  if (name == "float") return v.t == T::Float;
  if (name == "boolean") return v.t == T::Bool;
  if (name == "true") return v.t == T::Bool && v.b;
  if (name == "false") return v.t == T::Bool && !v.b;
  if (name == "mapping") return v.t == T::Map && !v.ns;
  if (name == "iterable" || name == "sequence") return v.t == T::Str || v.t == T::Arr || (v.t == T::Map && !v.ns);
  if (name == "callable") return v.t == T::Func;
  if (name == "even" || name == "odd") {
    if (v.t != T::Int) fail(c, line, std::string("test '") + name + "' of " + type_name(v));
    return ((v.i % 2) == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    const Value& d = other();
    if (v.t != T::Int || d.t != T::Int || d.i == 0) fail(c, line, "divisibleby needs nonzero integers");
    return v.i % d.i == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, other());
  if (name == "ne" || name == "!=") return !equal(v, other());
  if (name == "lt" || name == "lessthan" || name == "<") return compare(c, line, v, other()) < 0;
  if (name == "le" || name == "<=") return compare(c, line, v, other()) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(c, line, v, other()) > 0;
  if (name == "ge" || name == ">=") return compare(c, line, v, other()) >= 0;
  if (name == "in") return contains(c, line, other(), v);
  if (name == "sameas") {
    const Value& o = other();
    if (v.t != o.t) return false;
    if (v.t == T::None || v.t == T::Undefined) return true;
    if (v.t == T::Bool) return v.b == o.b;
    if (v.t == T::Arr) return v.l == o.l;
    if (v.t == T::Map) return v.d == o.d;
    return equal(v, o);
  }
  if (name == "lower" || name == "upper") return v.t == T::Str && map_case(v.s, name == "upper") == v.s;
  fail(c, line, "unknown test '" + name + "'");
}

// ---------------------------------------------------------------- lexer -----------------------
enum class Tk { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Int, Float, Str, Op, Eof };
struct Token {
  Tk k = Tk::Eof;
  std::string v;
  int line = 1;
  std::int64_t i = 0;
  double f = 0;
};

struct Lexer {
  const std::string& src;
  const std::string& name;
  std::vector<Token> out;
  int line = 1;

  [[noreturn]] void error(int ln, const std::string& what) const {
    throw TemplateError(name + " line " + std::to_string(ln) + ": " + what);
  }
  int lines_in(std::size_t a, std::size_t b) const {
    return static_cast<int>(
        std::count(src.begin() + static_cast<std::ptrdiff_t>(a), src.begin() + static_cast<std::ptrdiff_t>(b), '\n'));
  }
  static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f'; }

  void run() {
    std::size_t pos = 0;
    bool line_starting = true;
    const std::size_t n = src.size();
    while (pos < n) {
      std::size_t p = pos;
      while (true) {
        p = src.find('{', p);
        if (p == std::string::npos || p + 1 >= n) {
          p = std::string::npos;
          break;
        }
        if (src[p + 1] == '{' || src[p + 1] == '%' || src[p + 1] == '#') break;
        ++p;
      }
      std::string text = src.substr(pos, p == std::string::npos ? std::string::npos : p - pos);
      const int text_line = line;
      if (p == std::string::npos) {
        if (!text.empty()) out.push_back({Tk::Text, text, text_line});
        return;
      }
      line += lines_in(pos, p);
      const char kind = src[p + 1];
      const char sign = p + 2 < n && (src[p + 2] == '-' || src[p + 2] == '+') ? src[p + 2] : 0;
      if (sign == '-') {
        std::size_t e = text.size();
        while (e > 0 && is_ws(text[e - 1])) --e;
        text.resize(e);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks
        const std::size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            std::all_of(text.begin() + static_cast<std::ptrdiff_t>(l_pos), text.end(),
                        [](char ch) { return ch == ' ' || ch == '\t' || ch == '\v' || ch == '\f' || ch == '\r'; }))
          text.resize(l_pos);
      }
      if (!text.empty()) out.push_back({Tk::Text, text, text_line});
      std::size_t q = p + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        const std::size_t e = src.find("#}", q);
        if (e == std::string::npos) error(line, "comment not closed (missing #})");
        line += lines_in(p, e);
        std::size_t after = e + 2;
        after = trailing(after, e > q && src[e - 1] == '-', e > q && src[e - 1] == '+', true);
        line_starting = after > 0 && src[after - 1] == '\n';
        pos = after;
        continue;
      }
      out.push_back({kind == '{' ? Tk::VarBegin : Tk::BlockBegin, "", line});
      pos = expression(q, kind == '{' ? '}' : '%');
      line_starting = pos > 0 && src[pos - 1] == '\n';
    }
  }

  // After a tag end at `after`: `-` strips all whitespace, trim_blocks one newline (not after `+`).
  std::size_t trailing(std::size_t after, bool minus, bool plus, bool block) {
    if (minus) {
      const std::size_t start = after;
      while (after < src.size() && is_ws(src[after])) ++after;
      line += lines_in(start, after);
    } else if (!plus && block && after < src.size() && src[after] == '\n') {
      ++after;
      ++line;
    }
    return after;
  }

  // A number at pos into t (Int or Float, `_` separators allowed); returns the position after it.
  std::size_t lex_number(std::size_t pos, Token& t) const {
    const std::size_t n = src.size();
    std::size_t e = pos;
    bool flt = false;
    while (e < n && (std::isdigit(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
    if (e + 1 < n && src[e] == '.' && std::isdigit(static_cast<unsigned char>(src[e + 1]))) {
      flt = true;
      ++e;
      while (e < n && (std::isdigit(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
    }
    if (e < n && (src[e] == 'e' || src[e] == 'E')) {
      std::size_t x = e + 1;
      if (x < n && (src[x] == '+' || src[x] == '-')) ++x;
      if (x < n && std::isdigit(static_cast<unsigned char>(src[x]))) {
        flt = true;
        e = x;
        while (e < n && std::isdigit(static_cast<unsigned char>(src[e]))) ++e;
      }
    }
    std::string lit;
    for (std::size_t k = pos; k < e; ++k)
      if (src[k] != '_') lit += src[k];
    if (flt) {
      t.k = Tk::Float;
      t.f = std::strtod(lit.c_str(), nullptr);
    } else {
      t.k = Tk::Int;
      t.i = std::strtoll(lit.c_str(), nullptr, 10);
    }
    pos = e;
    return pos;
  }

  // A quoted string at pos (Python's escapes) into t; returns the position after the quote.
  std::size_t lex_string(std::size_t pos, char ch, Token& t) {
    const std::size_t n = src.size();
    std::size_t e = pos + 1;
    std::string s;
    while (e < n && src[e] != ch) {
      if (src[e] == '\\' && e + 1 < n) {
        const char x = src[++e];
        switch (x) {
          case 'n': s += '\n'; break;
          case 't': s += '\t'; break;
          case 'r': s += '\r'; break;
          case '0': s += '\0'; break;
          case 'b': s += '\b'; break;
          case 'f': s += '\f'; break;
          case 'v': s += '\v'; break;
          case 'a': s += '\a'; break;
          case '\\': s += '\\'; break;
          case '\'': s += '\''; break;
          case '"': s += '"'; break;
          case '\n': ++line; break;
          case 'x':
          case 'u':
          case 'U': {
            const std::size_t w = x == 'x' ? 2 : x == 'u' ? 4 : 8;
            if (e + w >= n || !std::all_of(src.begin() + static_cast<std::ptrdiff_t>(e + 1),
                                           src.begin() + static_cast<std::ptrdiff_t>(e + 1 + w),
                                           [](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; }))
              error(line, "bad \\" + std::string(1, x) + " escape in a string");
            const auto cp = static_cast<char32_t>(std::stoul(src.substr(e + 1, w), nullptr, 16));
            uni::append(s, cp);
            e += w;
            break;
          }
          default: s += '\\'; s += x;
        }
        ++e;
        continue;
      }
      if (src[e] == '\n') ++line;
      s += src[e++];
    }
    if (e >= n) error(t.line, "string not closed");
    t.k = Tk::Str;
    t.v = std::move(s);
    pos = e + 1;
    return pos;
  }

  std::size_t expression(std::size_t pos, char close) {
    const std::size_t n = src.size();
    const int open_line = line;
    int depth = 0;  // open ( [ {: a `}}` inside a dict literal does not end the tag (as in jinja2)
    while (true) {
      while (pos < n && is_ws(src[pos])) {
        if (src[pos] == '\n') ++line;
        ++pos;
      }
      if (pos >= n) error(open_line, std::string("tag not closed (missing ") + close + "})");
      // the end: [-+]?%} or [-]?}}
      for (const char m : {'-', '+', '\0'}) {
        if (depth > 0) break;
        const std::size_t at = pos + (m ? 1 : 0);
        if (m && src[pos] != m) continue;
        if (m == '+' && close != '%') continue;
        if (at + 1 < n && src[at] == close && src[at + 1] == '}') {
          out.push_back({close == '}' ? Tk::VarEnd : Tk::BlockEnd, "", line});
          return trailing(at + 2, m == '-', m == '+', close == '%');
        }
      }
      const char ch = src[pos];
      Token t;
      t.line = line;
      if (std::isalpha(static_cast<unsigned char>(ch)) || ch == '_') {
        std::size_t e = pos;
        while (e < n && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
        t.k = Tk::Name;
        t.v = src.substr(pos, e - pos);
        pos = e;
      } else if (std::isdigit(static_cast<unsigned char>(ch))) {
        pos = lex_number(pos, t);
      } else if (ch == '\'' || ch == '"') {
        pos = lex_string(pos, ch, t);
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                           ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
        bool found = false;
        for (const char* op : kOps) {
          const std::size_t len = std::char_traits<char>::length(op);
          if (src.compare(pos, len, op) == 0) {
            t.k = Tk::Op;
            t.v = op;
            pos += len;
            found = true;
            if (t.v == "(" || t.v == "[" || t.v == "{") ++depth;
            if ((t.v == ")" || t.v == "]" || t.v == "}") && depth > 0) --depth;
            break;
          }
        }
        if (!found) error(line, std::string("unexpected character '") + ch + "'");
      }
      out.push_back(std::move(t));
    }
  }
};

// ---------------------------------------------------------------- parser ----------------------
// The filters and tests call_filter / call_test know: an unknown one is refused when the template
// is parsed, as jinja2 refuses it when it compiles (even in a branch never taken).
bool known_filter(const std::string& n) {
  static const char* const k[] = {
      "safe",   "default", "d",     "trim",    "length", "count",    "upper",      "lower",      "capitalize", "title",
      "string", "escape",  "e",     "tojson",  "join",   "first",    "last",       "list",       "reverse",    "int",
      "float",  "abs",     "round", "replace", "items",  "dictsort", "selectattr", "rejectattr", "select",     "reject",
      "map",    "unique",  "sort",  "min",     "max",    "sum",      "indent",     "wordcount"};
  return std::any_of(std::begin(k), std::end(k), [&](const char* x) { return n == x; });
}
bool known_test(const std::string& n) {
  static const char* const k[] = {"defined",  "undefined", "none", "string", "number",      "integer",
                                  "float",    "boolean",   "true", "false",  "mapping",     "iterable",
                                  "sequence", "callable",  "even", "odd",    "divisibleby", "eq",
                                  "equalto",  "==",        "ne",   "!=",     "lt",          "lessthan",
                                  "<",        "le",        "<=",   "gt",     "greaterthan", ">",
                                  "ge",       ">=",        "in",   "sameas", "lower",       "upper"};
  return std::any_of(std::begin(k), std::end(k), [&](const char* x) { return n == x; });
}

struct Cursor {
  Cursor(const std::vector<Token>& t, const std::string& n) : toks(t), name(n) {}
  virtual ~Cursor() = default;
  virtual std::unique_ptr<Expr> expression(bool cond = true) = 0;  // ExprParser's
  // the token stream and its messages
  const std::vector<Token>& toks;
  const std::string& name;
  std::size_t at = 0;

  const Token& peek(std::size_t k = 0) const {
    static const Token eof;
    return at + k < toks.size() ? toks[at + k] : eof;
  }
  int cur_line() const { return at < toks.size() ? toks[at].line : (toks.empty() ? 1 : toks.back().line); }
  [[noreturn]] void error(const std::string& what) const {
    throw TemplateError(name + " line " + std::to_string(cur_line()) + ": " + what);
  }
  bool is_op(const char* op, std::size_t k = 0) const { return peek(k).k == Tk::Op && peek(k).v == op; }
  bool is_name(const char* nm, std::size_t k = 0) const { return peek(k).k == Tk::Name && peek(k).v == nm; }
  void expect_op(const char* op) {
    if (!is_op(op)) error(std::string("expected '") + op + "', found " + describe(peek()));
    ++at;
  }
  static std::string describe(const Token& t) {
    switch (t.k) {
      case Tk::Name: return "'" + t.v + "'";
      case Tk::Op: return "'" + t.v + "'";
      case Tk::Str: return "a string";
      case Tk::Int:
      case Tk::Float: return "a number";
      case Tk::BlockEnd: return "the end of the tag";
      case Tk::VarEnd: return "'}}'";
      case Tk::Eof: return "the end of the template";
      default: return "text";
    }
  }
  std::string expect_name() {
    if (peek().k != Tk::Name) error("expected a name, found " + describe(peek()));
    return toks[at++].v;
  }
  void expect_block_end() {
    if (peek().k != Tk::BlockEnd) error("expected the end of the tag, found " + describe(peek()));
    ++at;
  }
  template <class N>
  std::unique_ptr<N> node() {
    auto p = std::make_unique<N>();
    p->line = cur_line();
    return p;
  }

  // Parses statements until a block tag named in `ends` (left unconsumed: at points at its name).
};

struct PostfixParser : Cursor {  // atoms: literals, names, calls, filters, tests, attributes, subscripts
  using Cursor::Cursor;
  CallArgs call_args() {  // after '('
    CallArgs a;
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) error("*args and **kwargs in calls are not supported");
      if (peek().k == Tk::Name && is_op("=", 1)) {
        std::string k = toks[at].v;
        at += 2;
        a.kw.emplace_back(std::move(k), expression());
      } else {
        if (!a.kw.empty()) error("a positional argument after a keyword argument");
        a.pos.push_back(expression());
      }
      if (!is_op(")")) expect_op(",");
    }
    ++at;
    return a;
  }
  ExprP filters(ExprP e) {
    while (true) {
      if (is_op("|")) {
        auto f = node<FilterExpr>();
        ++at;
        f->name = expect_name();
        if (!known_filter(f->name)) {
          --at;
          error("unknown filter '" + f->name + "' (docs/tokenizers.md lists the filters this engine has)");
        }
        if (is_op("(")) {
          ++at;
          f->args = call_args();
        }
        f->obj = std::move(e);
        e = std::move(f);
      } else if (is_name("is")) {
        auto t = node<TestExpr>();
        ++at;
        if (is_name("not")) {
          t->negated = true;
          ++at;
        }
        if (peek().k == Tk::Name) {
          t->name = toks[at++].v;
        } else if (peek().k == Tk::Op && (peek().v == "==" || peek().v == "!=" || peek().v == "<" || peek().v == ">" ||
                                          peek().v == "<=" || peek().v == ">=")) {
          t->name = toks[at++].v;
        } else {
          error("expected a test name after 'is', found " + describe(peek()));
        }
        if (!known_test(t->name)) {
          --at;
          error("unknown test '" + t->name + "' (docs/tokenizers.md lists the tests this engine has)");
        }
        if (is_op("(")) {
          ++at;
          t->args = call_args();
        } else if (peek().k == Tk::Str || peek().k == Tk::Int || peek().k == Tk::Float || is_op("[") || is_op("{") ||
                   (peek().k == Tk::Name && !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") &&
                    !is_name("in") && !is_name("not") && !is_name("is"))) {
          t->args.pos.push_back(postfix(primary()));
        }
        t->obj = std::move(e);
        e = std::move(t);
      } else if (is_op("(")) {
        auto c = node<CallExpr>();
        ++at;
        c->args = call_args();
        c->callee = std::move(e);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprP postfix(ExprP e) {
    while (true) {
      if (is_op(".")) {
        ++at;
        if (peek().k == Tk::Int) {
          auto it = node<Item>();
          auto lit = node<Literal>();
          lit->v = Value::integer(toks[at++].i);
          it->obj = std::move(e);
          it->key = std::move(lit);
          e = std::move(it);
          continue;
        }
        auto a = node<Attr>();
        a->name = expect_name();
        a->obj = std::move(e);
        e = std::move(a);
      } else if (is_op("[")) {
        ++at;
        ExprP parts[3];
        int colons = 0;
        while (!is_op("]")) {
          if (is_op(":")) {
            if (++colons > 2) error("too many ':' in a slice");
            ++at;
            continue;
          }
          if (parts[colons]) error("expected ']' or ':', found " + describe(peek()));
          parts[colons] = expression();
        }
        ++at;
        if (colons == 0) {
          if (!parts[0]) error("empty subscript []");
          auto it = node<Item>();
          it->obj = std::move(e);
          it->key = std::move(parts[0]);
          e = std::move(it);
        } else {
          auto s = node<SliceExpr>();
          s->obj = std::move(e);
          s->a = std::move(parts[0]);
          s->b = std::move(parts[1]);
          s->step = std::move(parts[2]);
          e = std::move(s);
        }
      } else if (is_op("(")) {
        auto c = node<CallExpr>();
        ++at;
        c->args = call_args();
        c->callee = std::move(e);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprP primary() {
    const Token& t = peek();
    if (t.k == Tk::Str) {
      auto l = node<Literal>();
      std::string s = t.v;
      ++at;
      while (peek().k == Tk::Str) s += toks[at++].v;  // adjacent literals concatenate
      l->v = Value::str(std::move(s));
      return l;
    }
    if (t.k == Tk::Int || t.k == Tk::Float) {
      auto l = node<Literal>();
      l->v = t.k == Tk::Int ? Value::integer(t.i) : Value::real(t.f);
      ++at;
      return l;
    }
    if (t.k == Tk::Name) {
      const std::string& v = t.v;
      if (v == "true" || v == "True" || v == "false" || v == "False" || v == "none" || v == "None") {
        auto l = node<Literal>();
        l->v = (v == "none" || v == "None") ? Value::none() : Value::boolean(v == "true" || v == "True");
        ++at;
        return l;
      }
      auto n = node<Name>();
      n->name = v;
      ++at;
      return n;
    }
    if (is_op("(")) {
      ++at;
      if (is_op(")")) {
        ++at;
        auto empty = node<ListExpr>();
        empty->tuple = true;
        return empty;
      }
      ExprP e = expression();
      if (is_op(",")) {
        auto l = node<ListExpr>();
        l->tuple = true;
        l->items.push_back(std::move(e));
        while (is_op(",")) {
          ++at;
          if (is_op(")")) break;
          l->items.push_back(expression());
        }
        e = std::move(l);
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto l = node<ListExpr>();
      ++at;
      while (!is_op("]")) {
        l->items.push_back(expression());
        if (!is_op("]")) expect_op(",");
      }
      ++at;
      return l;
    }
    if (is_op("{")) {
      auto d = node<DictExpr>();
      ++at;
      while (!is_op("}")) {
        ExprP k = expression();
        expect_op(":");
        d->items.emplace_back(std::move(k), expression());
        if (!is_op("}")) expect_op(",");
      }
      ++at;
      return d;
    }
    error("unexpected " + describe(t) + " in an expression");
  }
};

struct ExprParser : PostfixParser {  // operators, with jinja2's precedence
  using PostfixParser::PostfixParser;
  // An expression, or a bare tuple `a, b` (a list here), as `set x = a, b` allows.
  ExprP tuple_or_expression() {
    ExprP e = expression();
    if (!is_op(",")) return e;
    auto l = node<ListExpr>();
    l->tuple = true;
    l->items.push_back(std::move(e));
    while (is_op(",")) {
      ++at;
      l->items.push_back(expression());
    }
    return l;
  }

  ExprP expression(bool cond = true) override {
    ExprP e = parse_or();
    if (!cond) return e;
    while (is_name("if")) {
      auto c = node<CondExpr>();
      ++at;
      c->then = std::move(e);
      c->cond = parse_or();
      if (is_name("else")) {
        ++at;
        c->otherwise = expression();
      }
      e = std::move(c);
    }
    return e;
  }
  // `a or b or …`, each operand `c and d and …`: left-associative chains of one keyword.
  ExprP parse_or() { return parse_chain(false); }
  ExprP parse_chain(bool is_and) {
    const auto operand = [&] { return is_and ? parse_not() : parse_chain(true); };
    ExprP e = operand();
    while (is_name(is_and ? "and" : "or")) {
      auto n = node<AndOr>();
      ++at;
      n->is_and = is_and;
      n->a = std::move(e);
      n->b = operand();
      e = std::move(n);
    }
    return e;
  }
  ExprP parse_not() {
    if (is_name("not")) {
      auto n = node<NotExpr>();
      ++at;
      n->a = parse_not();
      return n;
    }
    return parse_compare();
  }
  ExprP parse_compare() {
    ExprP e = parse_math1();
    std::unique_ptr<Compare> cmp;
    while (true) {
      std::string op;
      if (peek().k == Tk::Op && (peek().v == "==" || peek().v == "!=" || peek().v == "<" || peek().v == "<=" ||
                                 peek().v == ">" || peek().v == ">=")) {
        op = peek().v;
        ++at;
      } else if (is_name("in")) {
        op = "in";
        ++at;
      } else if (is_name("not") && is_name("in", 1)) {
        op = "notin";
        at += 2;
      } else {
        break;
      }
      if (!cmp) {
        cmp = node<Compare>();
        cmp->first = std::move(e);
      }
      cmp->rest.emplace_back(op, parse_math1());
    }
    if (cmp) return cmp;
    return e;
  }
  ExprP binary(ExprP a, std::string op, ExprP b) {
    auto n = node<Binary>();
    n->op = std::move(op);
    n->a = std::move(a);
    n->b = std::move(b);
    return n;
  }
  // One level of left-associative operators: next (op next)*.
  ExprP level(std::initializer_list<const char*> ops, ExprP (ExprParser::*next)()) {
    ExprP e = (this->*next)();
    while (true) {
      const char* hit = nullptr;
      for (const char* op : ops)
        if (is_op(op)) hit = op;
      if (hit == nullptr) return e;
      ++at;
      e = binary(std::move(e), hit, (this->*next)());
    }
  }
  ExprP parse_math1() { return level({"+", "-"}, &ExprParser::parse_concat); }
  ExprP parse_concat() { return level({"~"}, &ExprParser::parse_math2); }
  ExprP parse_math2() { return level({"*", "/", "//", "%"}, &ExprParser::parse_pow); }
  ExprP parse_pow() { return level({"**"}, &ExprParser::parse_filtered); }
  ExprP parse_filtered() { return parse_unary(true); }
  ExprP parse_unary(bool with_filter = true) {
    ExprP e;
    if (is_op("-") || is_op("+")) {
      auto u = node<Unary>();
      u->op = toks[at++].v[0];
      u->a = parse_unary(false);
      e = std::move(u);
    } else {
      e = postfix(primary());
    }
    if (with_filter) return filters(std::move(e));
    return e;
  }
};

struct Parser : ExprParser {  // statements (tags) and text
  using ExprParser::ExprParser;
  bool has_generation = false;

  Body body(const std::vector<std::string>& ends) {
    Body out;
    while (true) {
      const Token& t = peek();
      if (t.k == Tk::Eof) {
        if (!ends.empty()) error("missing {% " + ends.back() + " %} before the end of the template");
        return out;
      }
      if (t.k == Tk::Text) {
        auto o = node<Output>();
        o->text = t.v;
        ++at;
        out.push_back(std::move(o));
      } else if (t.k == Tk::VarBegin) {
        ++at;
        auto p = node<Print>();
        p->e = expression();
        if (peek().k != Tk::VarEnd) error("expected '}}', found " + describe(peek()));
        ++at;
        out.push_back(std::move(p));
      } else if (t.k == Tk::BlockBegin) {
        ++at;
        const std::string tag = peek().k == Tk::Name ? peek().v : "";
        if (std::find(ends.begin(), ends.end(), tag) != ends.end()) return out;
        out.push_back(statement());
      } else {
        error("unexpected " + describe(t));
      }
    }
  }

  StmtP statement() {
    const int line = cur_line();
    const std::string tag = expect_name();
    if (tag == "if") return if_stmt(line);
    if (tag == "for") return for_stmt(line);
    if (tag == "set") return set_stmt(line);
    if (tag == "macro") return macro_stmt(line);
    if (tag == "break" || tag == "continue") {
      auto s = node<LoopControl>();
      s->line = line;
      s->kind = tag == "break" ? Flow::Break : Flow::Continue;
      expect_block_end();
      return s;
    }
    if (tag == "generation") {
      has_generation = true;
      auto s = node<Generation>();
      s->line = line;
      expect_block_end();
      s->body = body({"endgeneration"});
      expect_name();
      expect_block_end();
      return s;
    }
    --at;
    error("the tag '" + tag +
          "' is not supported (chat templates use if, for, set, macro, break, continue, generation)");
  }
  StmtP if_stmt(int line) {
    auto s = node<If>();
    s->line = line;
    ExprP cond = expression();
    expect_block_end();
    while (true) {
      Body b = body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(b));
      const std::string end = expect_name();
      if (end == "endif") break;
      if (end == "elif") {
        cond = expression();
      } else {
        expect_block_end();
        s->branches.emplace_back(nullptr, body({"endif"}));
        expect_name();
        break;
      }
      expect_block_end();
    }
    expect_block_end();
    return s;
  }
  StmtP for_stmt(int line) {
    auto s = node<For>();
    s->line = line;
    const bool paren = is_op("(");
    if (paren) ++at;
    s->targets.push_back(expect_name());
    while (is_op(",")) {
      ++at;
      s->targets.push_back(expect_name());
    }
    if (paren) expect_op(")");
    if (!is_name("in")) error("expected 'in' in the for tag");
    ++at;
    s->iter = expression(/*cond=*/false);
    if (is_name("if")) {
      ++at;
      s->filter = expression(false);
    }
    if (is_name("recursive")) error("recursive for loops are not supported");
    expect_block_end();
    s->body = body({"else", "endfor"});
    if (expect_name() == "else") {
      expect_block_end();
      s->otherwise = body({"endfor"});
      expect_name();
    }
    expect_block_end();
    return s;
  }
  StmtP set_stmt(int line) {
    auto s = node<Set>();
    s->line = line;
    const std::string first = expect_name();
    if (is_op(".")) {
      ++at;
      auto ns = node<Name>();
      ns->name = first;
      s->ns = std::move(ns);
      s->names.push_back(expect_name());
    } else {
      s->names.push_back(first);
      while (is_op(",")) {
        ++at;
        s->names.push_back(expect_name());
      }
    }
    if (is_op("=")) {
      ++at;
      s->value = tuple_or_expression();
      expect_block_end();
      return s;
    }
    if (s->names.size() != 1) error("a block set takes one name");
    if (is_op("|")) error("filters on a block set are not supported");
    expect_block_end();
    s->body = body({"endset"});
    expect_name();
    expect_block_end();
    return s;
  }
  StmtP macro_stmt(int line) {
    auto s = node<Macro>();
    s->line = line;
    s->name = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      std::string p = expect_name();
      ExprP dflt;
      if (is_op("=")) {
        ++at;
        dflt = expression();
      }
      s->params.emplace_back(std::move(p), std::move(dflt));
      if (!is_op(")")) expect_op(",");
    }
    ++at;
    expect_block_end();
    s->body = body({"endmacro"});
    expect_name();
    expect_block_end();
    return s;
  }
};

}  // namespace

struct Template::Impl {
  std::string name;
  Body body;
  bool has_generation = false;
};

Template Template::parse(const std::string& source, const std::string& name) {
  Lexer lx{source, name, {}};
  lx.run();
  Parser p(lx.out, name);
  auto impl = std::make_shared<Impl>();
  impl->name = name;
  impl->body = p.body({});
  impl->has_generation = p.has_generation;
  return Template(std::move(impl));
}

bool Template::has_generation() const { return impl_->has_generation; }

Rendered Template::render(const ojson& context) const {
  Ctx c;
  c.name = &impl_->name;
  Frame root;
  c.root = &root;
  Ctx* cp = &c;
  root.vars["range"] = Value::func([cp](List& pos, Kwargs&, int ln) -> Value {
    std::int64_t a = 0, b = 0, st = 1;
    for (const auto& v : pos)
      if (v.t != T::Int) fail(*cp, ln, "range() takes integers");
    if (pos.size() == 1)
      b = pos[0].i;
    else if (pos.size() >= 2) {
      a = pos[0].i;
      b = pos[1].i;
      if (pos.size() == 3) st = pos[2].i;
    } else
      fail(*cp, ln, "range() takes 1 to 3 integers");
    if (st == 0) fail(*cp, ln, "range() step must not be zero");
    List out;
    for (std::int64_t k = a; st > 0 ? k < b : k > b; k += st) {
      out.push_back(Value::integer(k));
      if (out.size() > 1000000) fail(*cp, ln, "range() longer than 1,000,000");
    }
    return Value::list(std::move(out));
  });
  const auto make_dict = [](List& pos, Kwargs& kw) {
    Dict d;
    for (const auto& p : pos)
      if (p.t == T::Map) d = *p.d;
    for (const auto& [k, v] : kw) d.set(k, v);
    return d;
  };
  root.vars["namespace"] = Value::func([make_dict](List& pos, Kwargs& kw, int) -> Value {
    Value v = Value::dict(make_dict(pos, kw));
    v.ns = true;
    return v;
  });
  root.vars["dict"] =
      Value::func([make_dict](List& pos, Kwargs& kw, int) -> Value { return Value::dict(make_dict(pos, kw)); });
  root.vars["raise_exception"] = Value::func([cp](List& pos, Kwargs&, int ln) -> Value {
    const std::string msg = pos.empty() ? std::string("raise_exception()") : to_str(pos[0]);
    fail(*cp, ln, "the template raised: " + msg, msg);
  });
  root.vars["strftime_now"] = Value::func([cp](List& pos, Kwargs&, int ln) -> Value {
    if (pos.empty() || pos[0].t != T::Str) fail(*cp, ln, "strftime_now() takes a format string");
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const std::size_t n = std::strftime(buf, sizeof buf, pos[0].s.c_str(), &tm);
    return Value::str(std::string(buf, n));
  });
  if (context.is_object())
    for (const auto& [k, v] : context.items()) root.vars[k] = from_json(v);
  run_body(impl_->body, c, root);
  return Rendered{std::move(c.out), std::move(c.generation)};
}

}  // namespace trainbox::text
