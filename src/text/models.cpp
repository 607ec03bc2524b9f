// The models of tokenizer.json — BPE, WordPiece, WordLevel, Unigram — with HF tokenizers'
// semantics (models/*/ there): a pre-token in, ids out.
#include <array>
#include <atomic>
#include <cstdio>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "parts.h"
#include <trainbox/util/errors.h>

namespace trainbox::text {

using json = nlohmann::json;

namespace {

// Looked up by string_view without building a std::string (the lookups are the models' hot loop).
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Vocab {
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids;
  std::vector<std::string> tokens;      // by id; "" for a hole
  std::array<int32_t, 256> byte_ids{};  // <0x00>…<0xFF> (byte fallback); -1 where absent

  void add(std::string token, int32_t id, const std::string& where) {
    if (id < 0) throw UsageError(where + ": token '" + token + "' has the negative id " + std::to_string(id));
    if (static_cast<std::size_t>(id) >= tokens.size()) tokens.resize(static_cast<std::size_t>(id) + 1);
    tokens[static_cast<std::size_t>(id)] = token;
    ids.emplace(std::move(token), id);
  }
  std::optional<int32_t> find(std::string_view t) const {
    const auto it = ids.find(t);
    if (it == ids.end()) return std::nullopt;
    return it->second;
  }
  // Byte fallback (HF BPE and Unigram): `s` as its bytes' <0xXX> tokens, if all of them exist.
  bool append_bytes(std::string_view s, const std::function<void(int32_t)>& push) const {
    for (const char c : s)
      if (byte_ids[static_cast<unsigned char>(c)] < 0) return false;
    for (const char c : s) push(byte_ids[static_cast<unsigned char>(c)]);
    return true;
  }
  void index_bytes() {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_ids[static_cast<std::size_t>(b)] = find(name).value_or(-1);
    }
  }
  std::optional<std::string> token(int32_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= tokens.size()) return std::nullopt;
    if (tokens[static_cast<std::size_t>(id)].empty() && !ids.count("")) return std::nullopt;
    return tokens[static_cast<std::size_t>(id)];
  }
};

Vocab vocab_of(const json& j, const std::string& where) {
  Vocab v;
  if (!j.is_object()) throw UsageError(where + ": vocab is not an object of token → id");
  v.ids.reserve(j.size());
  for (const auto& [token, id] : j.items()) v.add(token, id.get<int32_t>(), where);
  v.index_bytes();
  return v;
}

std::optional<std::string> opt_string(const json& j, const char* key) {
  if (j.contains(key) && j[key].is_string()) return j[key].get<std::string>();
  return std::nullopt;
}

// --- BPE ---
class Bpe : public Model {
 public:
  Bpe(const json& j, const std::string& where) : serial_(next_serial()) {
    if (j.contains("dropout") && j["dropout"].is_number() && j["dropout"].get<double>() > 0)
      throw UsageError(where + ": BPE dropout " + j["dropout"].dump() + " is random at every encode",
                       "set \"dropout\": null in tokenizer.json (dropout is a training-time augmentation)");
    vocab_ = vocab_of(j.at("vocab"), where);
    unk_ = opt_string(j, "unk_token");
    prefix_ = opt_string(j, "continuing_subword_prefix").value_or("");
    suffix_ = opt_string(j, "end_of_word_suffix").value_or("");
    fuse_unk_ = j.value("fuse_unk", false);
    byte_fallback_ = j.value("byte_fallback", false);
    ignore_merges_ = j.value("ignore_merges", false);
    if (unk_ && !vocab_.find(*unk_)) throw UsageError(where + ": unk_token '" + *unk_ + "' is not in the vocab");
    int32_t rank = 0;
    for (const auto& m : j.at("merges")) {
      std::string a, b;
      if (m.is_string()) {  // "a b" (tokenizers < 0.20)
        const std::string s = m.get<std::string>();
        const auto sp = s.find(' ');
        if (sp == std::string::npos) throw UsageError(where + ": merge '" + s + "' is not two tokens");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        a = m.at(0).get<std::string>();
        b = m.at(1).get<std::string>();
      }
      const auto ia = vocab_.find(a), ib = vocab_.find(b);
      const auto in = vocab_.find(a + b.substr(std::min(prefix_.size(), b.size())));
      if (!ia || !ib || !in)
        throw UsageError(where + ": merge '" + a + " " + b + "' names a token that is not in the vocab",
                         "the tokenizer.json is damaged");
      merges_.emplace(key(*ia, *ib), std::make_pair(rank++, *in));
    }
  }

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override {
    if (word.empty()) return;
    if (ignore_merges_)
      if (const auto id = vocab_.find(word)) {
        out.push_back(*id);
        return;
      }
    // Each thread keeps a word cache (HF keeps one of 10 000 words); it belongs to one model.
    thread_local std::uint64_t owner = 0;
    thread_local std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache;
    if (owner != serial_) {
      cache.clear();
      owner = serial_;
    }
    const bool cacheable = word.size() < 256;
    if (cacheable) {
      const auto it = cache.find(word);
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids = merge_word(word);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
      if (cache.size() > 100000) cache.clear();
      cache.emplace(std::string(word), std::move(ids));
    }
  }
  std::optional<int32_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string> id_to_token(int32_t id) const override { return vocab_.token(id); }
  std::int64_t size() const override { return static_cast<std::int64_t>(vocab_.tokens.size()); }

 private:
  static std::uint64_t key(int32_t a, int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static std::uint64_t next_serial() {
    static std::atomic<std::uint64_t> n{0};
    return ++n;
  }

  struct Symbol {
    int32_t id;
    int prev, next;
    bool gone;
  };

  // HF Word::merge_word + merge_all: the lowest-ranked pair first, the leftmost among equals.
  std::vector<int32_t> merge_word(std::string_view w) const {
    std::vector<Symbol> sym;
    int32_t unk = -1;  // a pending unk (fuse_unk grows it)
    const auto push = [&](int32_t id) {
      sym.push_back({id, static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, false});
    };
    for (std::size_t i = 0; i < w.size();) {
      int n = 0;
      uni::next(w, i, &n);
      const bool first = i == 0, last = i + static_cast<std::size_t>(n) == w.size();
      std::string s(w.substr(i, static_cast<std::size_t>(n)));
      i += static_cast<std::size_t>(n);
      if (!first) s = prefix_ + s;
      if (last) s += suffix_;
      if (const auto id = vocab_.find(s)) {
        if (unk >= 0) push(unk), unk = -1;
        push(*id);
        continue;
      }
      if (byte_fallback_ && vocab_.append_bytes(s, push)) continue;
      if (unk_) {
        const int32_t u = *vocab_.find(*unk_);
        if (unk >= 0 && !fuse_unk_) push(unk);
        if (unk < 0 || !fuse_unk_) unk = u;
      }
    }
    if (unk >= 0) push(unk);
    if (!sym.empty()) sym.back().next = -1;

    struct Merge {
      int32_t rank;
      int pos;
      int32_t new_id;
      bool operator<(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Merge> queue;
    for (std::size_t k = 0; k + 1 < sym.size(); ++k) {
      const auto it = merges_.find(key(sym[k].id, sym[k + 1].id));
      if (it != merges_.end()) queue.push({it->second.first, static_cast<int>(k), it->second.second});
    }
    while (!queue.empty()) {
      const Merge top = queue.top();
      queue.pop();
      Symbol& cur = sym[static_cast<std::size_t>(top.pos)];
      if (cur.gone || cur.next < 0) continue;
      Symbol& right = sym[static_cast<std::size_t>(cur.next)];
      const auto it = merges_.find(key(cur.id, right.id));
      if (it == merges_.end() || it->second.second != top.new_id) continue;  // a stale entry
      cur.id = top.new_id;
      right.gone = true;
      cur.next = right.next;
      if (cur.next >= 0) sym[static_cast<std::size_t>(cur.next)].prev = top.pos;
      if (cur.prev >= 0) {
        const auto p = merges_.find(key(sym[static_cast<std::size_t>(cur.prev)].id, cur.id));
        if (p != merges_.end()) queue.push({p->second.first, cur.prev, p->second.second});
      }
      if (cur.next >= 0) {
        const auto q = merges_.find(key(cur.id, sym[static_cast<std::size_t>(cur.next)].id));
        if (q != merges_.end()) queue.push({q->second.first, top.pos, q->second.second});
      }
    }
    std::vector<int32_t> ids;
    ids.reserve(sym.size());
    for (const Symbol& s : sym)
      if (!s.gone) ids.push_back(s.id);
    return ids;
  }

  std::uint64_t serial_;
  Vocab vocab_;
  std::unordered_map<std::uint64_t, std::pair<int32_t, int32_t>> merges_;  // (a, b) → (rank, merged id)
  std::optional<std::string> unk_;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
};

// --- WordPiece: greedy longest match, a word with any unmatched part is one [UNK] ---
class WordPiece : public Model {
 public:
  WordPiece(const json& j, const std::string& where) {
    vocab_ = vocab_of(j.at("vocab"), where);
    unk_ = j.value("unk_token", std::string("[UNK]"));
    prefix_ = j.value("continuing_subword_prefix", std::string("##"));
    max_chars_ = j.value("max_input_chars_per_word", std::size_t{100});
    if (!vocab_.find(unk_)) throw UsageError(where + ": unk_token '" + unk_ + "' is not in the vocab");
  }
  void tokenize(std::string_view w, std::vector<int32_t>& out) const override {
    std::size_t chars = 0;
    for (std::size_t i = 0; i < w.size(); ++i) chars += (static_cast<unsigned char>(w[i]) & 0xC0) != 0x80;
    const int32_t unk = *vocab_.find(unk_);
    if (chars > max_chars_) {
      out.push_back(unk);
      return;
    }
    std::vector<int32_t> sub;
    std::string probe;
    for (std::size_t start = 0; start < w.size();) {
      std::size_t end = w.size();
      std::optional<int32_t> found;
      while (start < end) {
        probe.assign(start > 0 ? prefix_ : "");
        probe.append(w.substr(start, end - start));
        if ((found = vocab_.find(probe))) break;
        do --end;
        while (end > start && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80);
      }
      if (!found) {
        out.push_back(unk);
        return;
      }
      sub.push_back(*found);
      start = end;
    }
    out.insert(out.end(), sub.begin(), sub.end());
  }
  std::optional<int32_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string> id_to_token(int32_t id) const override { return vocab_.token(id); }
  std::int64_t size() const override { return static_cast<std::int64_t>(vocab_.tokens.size()); }

 private:
  Vocab vocab_;
  std::string unk_, prefix_;
  std::size_t max_chars_ = 100;
};

// --- WordLevel: the word's id, or the unk token's ---
class WordLevel : public Model {
 public:
  WordLevel(const json& j, const std::string& where) {
    vocab_ = vocab_of(j.at("vocab"), where);
    unk_ = opt_string(j, "unk_token");
  }
  void tokenize(std::string_view w, std::vector<int32_t>& out) const override {
    if (const auto id = vocab_.find(w)) {
      out.push_back(*id);
    } else if (const auto u = unk_ ? vocab_.find(*unk_) : std::nullopt) {
      out.push_back(*u);
    } else {
      throw DataError("tokenizer: '" + std::string(w) + "' is not in the WordLevel vocab, which has no unk_token");
    }
  }
  std::optional<int32_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string> id_to_token(int32_t id) const override { return vocab_.token(id); }
  std::int64_t size() const override { return static_cast<std::int64_t>(vocab_.tokens.size()); }

 private:
  Vocab vocab_;
  std::optional<std::string> unk_;
};

// --- Unigram: SentencePiece's Viterbi (HF encode_optimized), unknown runs fused into one ---
class Unigram : public Model {
 public:
  Unigram(const json& j, const std::string& where) {
    int32_t id = 0;
    for (const auto& e : j.at("vocab")) {
      const std::string t = e.at(0).get<std::string>();
      scores_.push_back(e.at(1).get<double>());
      vocab_.add(t, id++, where);
      max_len_ = std::max(max_len_, t.size());
      min_score_ = std::min(min_score_, scores_.back());
    }
    if (j.contains("unk_id") && j["unk_id"].is_number_integer()) unk_id_ = j["unk_id"].get<int32_t>();
    byte_fallback_ = j.value("byte_fallback", false);
    vocab_.index_bytes();
  }
  void tokenize(std::string_view s, std::vector<int32_t>& out) const override {
    if (s.empty()) return;
    struct Node {
      int32_t id = 0;
      double score = 0;
      std::ptrdiff_t from = -1;
    };
    constexpr double kUnkPenalty = 10.0;
    std::vector<Node> best(s.size() + 1);
    for (std::size_t at = 0; at < s.size();) {
      int mb = 0;
      uni::next(s, at, &mb);
      bool single = false;
      for (std::size_t len = 1; len <= max_len_ && at + len <= s.size(); ++len) {
        const auto id = vocab_.find(s.substr(at, len));
        if (!id) continue;
        Node& t = best[at + len];
        const double cand = scores_[static_cast<std::size_t>(*id)] + best[at].score;
        if (t.from < 0 || cand > t.score) t = {*id, cand, static_cast<std::ptrdiff_t>(at)};
        if (len == static_cast<std::size_t>(mb)) single = true;
      }
      if (!single) {
        if (!unk_id_) throw DataError("tokenizer: the Unigram model has no unk_id for '" + std::string(s) + "'");
        Node& t = best[at + static_cast<std::size_t>(mb)];
        const double cand = min_score_ - kUnkPenalty + best[at].score;
        if (t.from < 0 || cand > t.score) t = {*unk_id_, cand, static_cast<std::ptrdiff_t>(at)};
      }
      at += static_cast<std::size_t>(mb);
    }
    std::vector<std::string> pieces;
    std::string unk_run;
    for (std::size_t end = s.size(); end > 0;) {
      const Node& n = best[end];
      const auto from = static_cast<std::size_t>(n.from);
      if (unk_id_ && n.id == *unk_id_) {
        unk_run.insert(0, s.substr(from, end - from));
      } else {
        if (!unk_run.empty()) pieces.push_back(std::move(unk_run)), unk_run.clear();
        pieces.emplace_back(s.substr(from, end - from));
      }
      end = from;
    }
    if (!unk_run.empty()) pieces.push_back(std::move(unk_run));
    for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
      if (const auto id = vocab_.find(*it)) {
        out.push_back(*id);
        continue;
      }
      if (byte_fallback_ && vocab_.append_bytes(*it, [&](int32_t b) { out.push_back(b); })) continue;
      out.push_back(*unk_id_);
    }
  }
  std::optional<int32_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string> id_to_token(int32_t id) const override { return vocab_.token(id); }
  std::int64_t size() const override { return static_cast<std::int64_t>(vocab_.tokens.size()); }

 private:
  Vocab vocab_;
  std::vector<double> scores_;
  std::size_t max_len_ = 0;
  double min_score_ = std::numeric_limits<double>::max();
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
};

}  // namespace

std::unique_ptr<Model> make_model(const json& j, const std::string& where) {
  const std::string type = j.is_object() ? j.value("type", "") : "";
  const std::string at = where + " model " + type;
  if (type == "BPE" || (type.empty() && j.is_object() && j.contains("merges"))) return std::make_unique<Bpe>(j, at);
  if (type == "WordPiece") return std::make_unique<WordPiece>(j, at);
  if (type == "WordLevel") return std::make_unique<WordLevel>(j, at);
  if (type == "Unigram") return std::make_unique<Unigram>(j, at);
  throw UsageError(where + ": model type '" + type + "' is not supported",
                   "supported: BPE, WordPiece, WordLevel, Unigram (docs/tokenizers.md)");
}

}  // namespace trainbox::text
