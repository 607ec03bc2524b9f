// WebDataset shards (trainbox/data/image/webdataset.h): brace expansion as braceexpand 0.1.7,
// grouping as webdataset 1.0.2's tariterators.group_by_keys.
#include <trainbox/data/image/webdataset.h>

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include <trainbox/data/image/folder.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/parse.h>

namespace trainbox::data {

namespace {

constexpr const char* kPatternHint =
    "shard names are brace patterns like shards/train-{000000..000127}.tar or {train,val}.tar (docs/datasets.md)";

using Alternatives = std::vector<std::string>;

// --- brace expansion: braceexpand.py's parse_pattern / parse_expression / parse_sequence ---

class BraceExpander {
 public:
  explicit BraceExpander(std::string_view whole) : whole_(whole) {}

  Alternatives pattern(std::string_view s) {
    std::vector<Alternatives> items;
    std::size_t start = 0;
    const int depth = scan(s, [&](std::size_t pos, int outside) {
      if (outside != 0) return;
      if (s[pos] == '{') {
        if (pos > start) items.push_back({std::string(s.substr(start, pos - start))});
        start = pos;
      } else if (s[pos] == '}') {
        const std::string_view expr = s.substr(start + 1, pos - start - 1);
        if (std::optional<Alternatives> item = expression(expr)) {
          items.push_back(std::move(*item));
        } else {  // not a range or a list: the braces are literal
          items.push_back({"{"});
          items.push_back(pattern(expr));
          items.push_back({"}"});
        }
        start = pos + 1;
      }
    });
    if (depth != 0) fail("unbalanced braces");
    if (start < s.size()) items.push_back({std::string(s.substr(start))});
    return product(items);
  }

 private:
  // braceexpand.py's walk: a backslash escapes the next character, braces nest. Calls
  // f(pos, depth) for each unescaped character, with the depth of the text around it (a '{' and
  // its '}' see the depth outside them). Returns the depth at the end: 0 when balanced.
  template <class F>
  static int scan(std::string_view s, F&& f) {
    int depth = 0;
    for (std::size_t pos = 0; pos < s.size(); ++pos) {
      if (s[pos] == '\\') {
        ++pos;
        continue;
      }
      if (s[pos] == '}') --depth;
      f(pos, depth);
      if (s[pos] == '{') ++depth;
    }
    return depth;
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw UsageError(fmt::format("shard pattern '{}': {}", whole_, why), kPatternHint);
  }

  Alternatives product(const std::vector<Alternatives>& items) const {
    Alternatives out{""};
    for (const Alternatives& item : items) {
      if (item.empty()) return {};
      if (out.size() * item.size() > kMaxShards) fail(fmt::format("expands to more than {} names", kMaxShards));
      Alternatives next;
      next.reserve(out.size() * item.size());
      for (const std::string& a : out)
        for (const std::string& b : item) next.push_back(a + b);
      out = std::move(next);
    }
    return out;
  }

  // "-?\d+" with at most 18 digits.
  std::optional<long long> number(std::string_view s) const {
    const std::size_t digits = s.size() - (!s.empty() && s[0] == '-');
    if (digits == 0 || !std::all_of(s.end() - digits, s.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    if (digits > 18) fail(fmt::format("the number {} has more than 18 digits", s));
    return parse_integer(s);
  }

  // braceexpand's int_range_re ^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$ and char_range_re (one
  // letter each side), else a comma list.
  std::optional<Alternatives> expression(std::string_view e) {
    std::vector<std::string_view> parts;
    for (std::size_t from = 0;;) {
      const std::size_t dots = e.find("..", from);
      parts.push_back(e.substr(from, dots == std::string_view::npos ? dots : dots - from));
      if (dots == std::string_view::npos) break;
      from = dots + 2;
    }
    if (parts.size() != 2 && parts.size() != 3) return sequence(e);
    long long step = 1;
    if (parts.size() == 3) {
      std::string_view st = parts[2];
      if (st.starts_with("-")) st.remove_prefix(1);
      const std::optional<long long> s = st.starts_with("-") ? std::nullopt : number(st);
      if (!s) return sequence(e);
      step = *s == 0 ? 1 : *s;  // braceexpand: int(step) or 1
    }
    if (auto lo = number(parts[0]), hi = number(parts[1]); lo && hi)
      return int_range(parts[0], parts[1], *lo, *hi, step);
    auto letter = [](std::string_view s) {
      return s.size() == 1 && ((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z'));
    };
    if (letter(parts[0]) && letter(parts[1])) return char_range(parts[0][0], parts[1][0], step);
    return sequence(e);
  }

  Alternatives int_range(std::string_view a, std::string_view b, long long lo, long long hi, long long step) const {
    auto zero_led = [](std::string_view s) {
      return s != "0" && s != "-0" && (s.starts_with("0") || s.starts_with("-0"));
    };
    const std::size_t width = zero_led(a) || zero_led(b) ? std::max(a.size(), b.size()) : 0;
    const unsigned long long span = lo < hi ? static_cast<unsigned long long>(hi) - static_cast<unsigned long long>(lo)
                                            : static_cast<unsigned long long>(lo) - static_cast<unsigned long long>(hi);
    if (span / static_cast<unsigned long long>(step) >= kMaxShards)
      fail(fmt::format("the range {}..{} has more than {} names", a, b, kMaxShards));
    Alternatives out;
    for (unsigned long long k = 0; k <= span; k += static_cast<unsigned long long>(step)) {
      const long long v = lo < hi ? lo + static_cast<long long>(k) : lo - static_cast<long long>(k);
      out.push_back(width ? fmt::format("{:0{}d}", v, width) : std::to_string(v));
    }
    return out;
  }

  static Alternatives char_range(char a, char b, long long step) {
    static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    const long long i = static_cast<long long>(kAlphabet.find(a)), j = static_cast<long long>(kAlphabet.find(b));
    Alternatives out;
    if (i < j)
      for (long long k = i; k <= j; k += step) out.emplace_back(1, kAlphabet[std::size_t(k)]);
    else
      for (long long k = i; k >= j; k -= step) out.emplace_back(1, kAlphabet[std::size_t(k)]);
    return out;
  }

  // "a,b,{c,d}" → the chain of each part's expansion; nullopt without a top-level comma.
  std::optional<Alternatives> sequence(std::string_view s) {
    std::vector<std::string_view> parts;
    std::size_t start = 0;
    const int depth = scan(s, [&](std::size_t pos, int outside) {
      if (outside == 0 && s[pos] == ',') {
        parts.push_back(s.substr(start, pos - start));
        start = pos + 1;
      }
    });
    if (depth != 0 || parts.empty()) return std::nullopt;
    parts.push_back(start < s.size() ? s.substr(start) : std::string_view());
    Alternatives out;
    for (std::string_view p : parts) {
      Alternatives a = pattern(p);
      if (out.size() + a.size() > kMaxShards) fail(fmt::format("expands to more than {} names", kMaxShards));
      out.insert(out.end(), std::make_move_iterator(a.begin()), std::make_move_iterator(a.end()));
    }
    return out;
  }

  std::string_view whole_;
};

// braceexpand's final step: "\x" → "x".
std::string unescape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] != '\n') ++i;
    out += s[i];
  }
  return out;
}

bool is_image_ext(std::string_view ext) { return ext == "jpg" || ext == "jpeg" || ext == "png"; }

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

constexpr const char* kSampleHint =
    "each sample needs <key>.jpg|.jpeg|.png and <key>.cls holding its class index as decimal text, in consecutive "
    "members; `trainbox data pack` writes such shards (docs/datasets.md)";

}  // namespace

std::vector<std::string> expand_shards(std::string_view patterns) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {  // webdataset's expand_urls: "a.tar::b-{0..3}.tar"
    const std::size_t sep = patterns.find("::", start);
    const std::string_view one = patterns.substr(start, sep == std::string_view::npos ? sep : sep - start);
    BraceExpander ex(one);
    for (const std::string& s : ex.pattern(one)) out.push_back(unescape(s));
    if (out.size() > kMaxShards)
      throw UsageError(fmt::format("shard pattern '{}' expands to more than {} names", patterns, kMaxShards),
                       kPatternHint);
    if (sep == std::string_view::npos) break;
    start = sep + 2;
  }
  return out;
}

std::optional<std::pair<std::string, std::string>> split_key(std::string_view name) {
  // ^((?:.*/|)[^.]+)[.]([^/]*)$ — the extension starts at the basename's first '.', which must
  // not be its first character; if it is, the regex can still match by taking the folder's
  // trailing '/' into [^.]+, when that last folder's name holds no '.'.
  const std::size_t slash = name.rfind('/');
  const std::size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  const std::size_t dot = name.find('.', base);
  if (dot == std::string_view::npos) return std::nullopt;
  if (dot == base) {
    if (slash == std::string_view::npos) return std::nullopt;
    const std::size_t prev = slash == 0 ? std::string_view::npos : name.rfind('/', slash - 1);
    const std::size_t from = prev == std::string_view::npos ? 0 : prev + 1;
    if (name.substr(from, slash - from).find('.') != std::string_view::npos) return std::nullopt;
  }
  return std::make_pair(std::string(name.substr(0, dot)), std::string(name.substr(dot + 1)));
}

bool is_meta_member(std::string_view name) {
  // re.match(r"__[^/]*__($|/)", name)
  const std::string_view first = name.substr(0, name.find('/'));
  return first.size() >= 4 && first.starts_with("__") && first.ends_with("__");
}

std::optional<std::int64_t> parse_label(std::string_view bytes) {
  const std::optional<long long> v = parse_integer(bytes);
  if (!v || *v < 0 || *v > 0x7fffffff) return std::nullopt;
  return *v;
}

ShardReader::ShardReader(std::string path) : tar_(std::move(path)) {}

bool ShardReader::next_member(TarMember& m, std::string& key, std::string& ext) {
  while (tar_.next(m)) {
    if (is_meta_member(m.name)) continue;
    auto kv = split_key(m.name);
    if (!kv) continue;
    key = std::move(kv->first);
    ext = lowercase(std::move(kv->second));
    return true;
  }
  return false;
}

bool ShardReader::next_entry(WdsIndexEntry& out) {
  TarMember m;
  std::string key, ext;
  if (lookahead_) {
    m = std::move(*lookahead_);
    lookahead_.reset();
    key = std::move(look_key_);
    ext = std::move(look_ext_);
  } else if (!next_member(m, key, ext)) {
    return false;
  }
  out = WdsIndexEntry{key, "", 0, 0, -1};
  std::vector<std::string> seen;
  auto fail = [&](const std::string& why) {
    throw DataError(fmt::format("tar shard {}: sample '{}' {}", path(), key, why), kSampleHint);
  };
  for (;;) {
    if (std::find(seen.begin(), seen.end(), ext) != seen.end())
      fail(fmt::format("has two '{}' members (the second at byte offset {})", ext, m.header_offset));
    seen.push_back(ext);
    if (is_image_ext(ext)) {
      if (!out.image_ext.empty()) fail(fmt::format("has two images, .{} and .{}", out.image_ext, ext));
      out.image_ext = ext;
      out.image_offset = m.offset;
      out.image_size = m.size;
    } else if (ext == kLabelExtension) {
      if (m.size > 64) fail(fmt::format("has a .cls label of {} bytes; a label is a class index", m.size));
      tar_.read(m, label_buf_);
      const std::string_view text(reinterpret_cast<const char*>(label_buf_.data()), label_buf_.size());
      const auto label = parse_label(text);
      if (!label) fail(fmt::format("has label '{}' in .cls, not a class index 0..2^31-1", text.substr(0, 20)));
      out.label = *label;
    }
    std::string k2, e2;
    if (!next_member(m, k2, e2)) break;
    if (k2 != key) {
      lookahead_ = std::move(m);
      look_key_ = std::move(k2);
      look_ext_ = std::move(e2);
      break;
    }
    ext = std::move(e2);
  }
  std::string members;
  for (const auto& e : seen) members += (members.empty() ? "" : ", ") + e;
  if (out.image_ext.empty()) fail(fmt::format("has no .jpg/.jpeg/.png image (its members: {})", members));
  if (out.label < 0) fail(fmt::format("has no .cls label (its members: {})", members));
  return true;
}

bool ShardReader::next(WdsSample& out) {
  WdsIndexEntry e;
  if (!next_entry(e)) return false;
  out.key = std::move(e.key);
  out.image_ext = std::move(e.image_ext);
  out.label = e.label;
  out.image_offset = e.image_offset;
  const TarMember m{out.key + "." + out.image_ext, e.image_offset - std::min<std::uint64_t>(e.image_offset, kTarBlock),
                    e.image_offset, e.image_size};
  tar_.read(m, out.image);
  return true;
}

std::vector<WdsIndexEntry> index_shard(const std::string& path) {
  ShardReader r(path);
  std::vector<WdsIndexEntry> out;
  WdsIndexEntry e;
  while (r.next_entry(e)) out.push_back(std::move(e));
  return out;
}

}  // namespace trainbox::data
