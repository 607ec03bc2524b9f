// The store's policy: the save protocol (temp dir, manifest, rename, `latest`), pruning,
// verification against the manifest, and which checkpoint a resume takes. The bytes go through
// io/durable_file.h, the digests through io/sha256.h.
#include <trainbox/train/checkpoint.h>
#include <trainbox/train/checkpoint_path.h>

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <trainbox/io/durable_file.h>
#include <trainbox/io/sha256.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/strings.h>

namespace trainbox::train {
namespace fs = std::filesystem;

namespace {

constexpr int kManifestVersion = 1;
constexpr const char* kManifestFormat = "trainbox-checkpoint";

// A manifest entry's path: relative, inside the checkpoint, not one of the two files that
// describe the checkpoint (a manifest is untrusted input like any file on disk).
bool safe_relative_path(const std::string& p) {
  if (p.empty() || p.size() > 4096 || p.find('\0') != std::string::npos || p.front() == '/') return false;
  for (const auto& part : fs::path(p))
    if (part == ".." || part == "." || part.empty()) return false;
  return p != kCheckpointComplete && p != kCheckpointManifest;
}

// The files of a checkpoint dir being saved, relative and sorted (the manifest's order).
std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), dir).generic_string());
  std::sort(out.begin(), out.end());
  return out;
}

// Hashes and fsyncs every file the caller wrote, then writes MANIFEST.json and COMPLETE.
void write_manifest(const std::string& dir, std::int64_t step, const std::string& sharding_json) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& rel : files_under(dir)) {
    const std::string path = dir + "/" + rel;
    const io::FileDigest d = io::sha256_file(path, /*sync=*/true);
    if (d.err) throw io::FileWriteError("cannot read back " + path, d.err);
    files.push_back({{"path", rel}, {"bytes", d.bytes}, {"sha256", d.sha256}});
  }
  nlohmann::json manifest = {{"format", kManifestFormat},
                             {"version", kManifestVersion},
                             {"step", step},
                             {"algorithm", "sha256"},
                             {"files", files}};
  if (!sharding_json.empty()) manifest["sharding"] = nlohmann::json::parse(sharding_json);
  const std::string text = manifest.dump(2) + "\n";
  io::DurableFile::write_text(dir + "/" + kCheckpointManifest, text);
  io::DurableFile::write_text(dir + "/" + kCheckpointComplete,
                              fmt::format("{}\n{} sha256 {}\n", step, kCheckpointManifest, io::sha256_hex(text)));
}

// Directories are durable only once fsync'ed themselves (their entries).
void fsync_dirs(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_directory()) io::fsync_path(e.path().string());
  io::fsync_path(dir);
}

// "step_40" → 40; anything else → nullopt.
std::optional<std::int64_t> step_of(const std::string& name) {
  if (!starts_with(name, "step_") || name.size() == 5 || name.size() > 5 + 18) return std::nullopt;  // fits an int64
  if (!std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  return std::stoll(name.substr(5));
}

// step_N directories of `dir`, newest first.
std::vector<std::pair<std::int64_t, std::string>> step_dirs(const std::string& dir) {
  std::vector<std::pair<std::int64_t, std::string>> all;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const auto name = e.path().filename().string();
    if (auto n = step_of(name); n && e.is_directory(ec)) all.emplace_back(*n, name);
  }
  std::sort(all.rbegin(), all.rend());
  return all;
}

std::string first_line(const std::string& s, std::size_t max = 300) {
  std::string line = s.substr(0, s.find('\n'));
  return line.size() > max ? line.substr(0, max) + "…" : line;
}

// Text read from disk, shown in a message: printable ASCII only.
std::string printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

std::string joined(const std::vector<CheckpointProblem>& problems) {
  std::string out;
  for (const auto& p : problems) out += (out.empty() ? "" : "; ") + p.message();
  return out;
}

// --- the resume wording, one for --resume DIR (check_resumable) and --resume auto (latest) ---
// Why an existing checkpoint dir cannot be resumed ("is incomplete (no COMPLETE marker)",
// "is damaged: model.pt: …"), or "" when it can. Hashes its files.
std::string why_not_resumable(const std::string& checkpoint_dir) {
  std::error_code ec;
  if (!fs::exists(checkpoint_dir + "/" + kCheckpointComplete, ec))
    return fmt::format("is incomplete (no {} marker)", kCheckpointComplete);
  if (auto problems = CheckpointStore::verify(checkpoint_dir); !problems.empty())
    return "is damaged: " + joined(problems);
  return "";
}

std::string unverified_note(const std::string& checkpoint_dir) {
  return fmt::format("checkpoint {} predates checksums (no {}): loading it unverified", checkpoint_dir,
                     kCheckpointManifest);
}

// --- a sharded checkpoint: the manifest's layout against its rank files (docs/distributed.md) ---
// Every rank r < world_size has rank_<r>.params.pt, rank_<r>.optim.pt and rank_<r>.json listed
// (hashed), no rank >= world_size has any, and each rank_<r>.json — written by rank r next to its
// shard — names that rank, world and step and the layout's shard sizes. Torch-free: the
// tensors' own sizes are checked again as they are read (sharded_checkpoint.cpp).
std::vector<CheckpointProblem> verify_sharding(const std::string& dir, const nlohmann::json& sh, std::int64_t step,
                                               const std::set<std::string>& listed) {
  std::vector<CheckpointProblem> out;
  std::int64_t world = 0;
  std::vector<std::int64_t> sizes;
  try {
    if (!sh.is_object()) throw std::runtime_error("not an object");
    world = sh.at("world_size").get<std::int64_t>();
    if (world < 1 || world > (1 << 20)) throw std::runtime_error(fmt::format("world_size {}", world));
    if (sh.at("step").get<std::int64_t>() != step)
      throw std::runtime_error(
          fmt::format("its layout says step {}, the manifest step {}", sh.at("step").dump(), step));
    for (const auto& b : sh.at("buckets")) {
      const auto size = b.at("shard_size").get<std::int64_t>(), numel = b.at("numel").get<std::int64_t>();
      if (size < 0 || b.at("padded").get<std::int64_t>() != size * world || numel > size * world)
        throw std::runtime_error(
            fmt::format("bucket {} is {} elements, not a shard of {} x {} ranks", sizes.size(), numel, size, world));
      for (const auto& p : b.at("params"))
        if (p.at("offset").get<std::int64_t>() < 0 ||
            p.at("offset").get<std::int64_t>() + p.at("numel").get<std::int64_t>() > numel)
          throw std::runtime_error("parameter " + printable(p.at("name").get<std::string>()) + " lies outside bucket " +
                                   std::to_string(sizes.size()));
      sizes.push_back(size);
    }
  } catch (const std::exception& e) {
    out.push_back({kCheckpointManifest, "damaged sharding layout: " + first_line(e.what(), 160)});
    return out;
  }
  for (std::int64_t r = 0; r < world; ++r)
    for (const char* kind : {".params.pt", ".optim.pt", ".json"}) {
      const std::string f = fmt::format("rank_{}{}", r, kind);
      if (!listed.count(f)) out.push_back({f, fmt::format("missing: the manifest's layout has {} ranks", world)});
    }
  for (const auto& f : listed)
    if (starts_with(f, "rank_")) {
      const std::string num = f.substr(5, f.find('.') - 5);
      const auto r = parse_integer(num);
      if (!r || *r >= world)
        out.push_back({f, fmt::format("a shard the manifest's layout (world size {}) does not have", world)});
    }
  if (!out.empty()) return out;
  for (std::int64_t r = 0; r < world; ++r) {
    const std::string f = fmt::format("rank_{}.json", r);
    const auto j = nlohmann::json::parse(read_file(dir + "/" + f).value_or(""), nullptr, false);
    try {
      if (!j.is_object()) throw std::runtime_error("not a JSON object");
      const auto at_step = j.at("step").get<std::int64_t>();
      if (at_step != step)
        throw std::runtime_error(fmt::format(
            "written at step {}, the manifest is step {} (shards from two different steps)", at_step, step));
      if (j.at("rank").get<std::int64_t>() != r || j.at("world_size").get<std::int64_t>() != world)
        throw std::runtime_error(fmt::format("names rank {} of {}, the manifest rank {} of {}", j.at("rank").dump(),
                                             j.at("world_size").dump(), r, world));
      if (j.at("shard_sizes").get<std::vector<std::int64_t>>() != sizes)
        throw std::runtime_error("its shard sizes " + first_line(j.at("shard_sizes").dump(), 80) +
                                 " differ from the manifest's layout");
    } catch (const std::exception& e) {
      out.push_back({f, "does not match the manifest: " + first_line(e.what(), 200)});
    }
  }
  return out;
}

}  // namespace

CheckpointStore::CheckpointStore(std::string run_dir, std::int64_t keep)
    : dir_(std::move(run_dir) + "/checkpoints"), keep_(std::max<std::int64_t>(1, keep)) {}

void CheckpointStore::clean_incomplete() const {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "latest.tmp") fs::remove(e.path(), ec);
    if (!starts_with(name, ".tmp-")) continue;
    // .tmp-old-step_N-PID: a complete step_N that a save of the same step moved aside and
    // was interrupted before its replacement went in. `latest` may name step_N: put it back.
    if (starts_with(name, ".tmp-old-")) {
      const std::string rest = name.substr(9), target = rest.substr(0, rest.rfind('-'));
      if (step_of(target) && !fs::exists(dir_ + "/" + target, ec) && fs::exists(e.path() / kCheckpointComplete, ec)) {
        fs::rename(e.path(), dir_ + "/" + target, ec);
        if (!ec) continue;
      }
    }
    fs::remove_all(e.path(), ec);
  }
}

std::string CheckpointStore::save(std::int64_t step, const std::function<void(const std::string&)>& write_files,
                                  const std::function<void()>& before_commit) {
  return save_in(step, fmt::format("{}/.tmp-step_{}-{}", dir_, step, ::getpid()), /*fresh=*/true, write_files,
                 before_commit, "");
}

// One name every rank computes (no pid): the ranks of one job share it; one job per run dir (RunDirLock).
std::string CheckpointStore::staging_dir(std::int64_t step) const {
  return fmt::format("{}/.tmp-step_{}-shards", dir_, step);
}

void CheckpointStore::begin_staged(std::int64_t step) const {
  const std::string tmp = staging_dir(step);
  try {
    fs::create_directories(dir_);
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    io::fsync_path(dir_);  // the other ranks (other hosts on a shared file system) look for it next
  } catch (const fs::filesystem_error& e) {
    throw SystemError(fmt::format("checkpoint save failed: cannot create {}: {}", tmp, first_line(e.what())),
                      "check the run dir's file system; --resume auto continues from `latest`");
  }
}

void CheckpointStore::abandon_staged(std::int64_t step) const {
  std::error_code ec;
  fs::remove_all(staging_dir(step), ec);
}

std::string CheckpointStore::save_staged(std::int64_t step, const std::function<void(const std::string&)>& write_files,
                                         const std::function<void()>& before_commit, const std::string& sharding_json) {
  return save_in(step, staging_dir(step), /*fresh=*/false, write_files, before_commit, sharding_json);
}

std::string CheckpointStore::save_in(std::int64_t step, const std::string& tmp, bool fresh,
                                     const std::function<void(const std::string&)>& write_files,
                                     const std::function<void()>& before_commit, const std::string& sharding_json) {
  const std::string name = fmt::format("step_{}", step);
  const std::string final_dir = dir_ + "/" + name;
  const std::string old = fmt::format("{}/.tmp-old-{}-{}", dir_, name, ::getpid());
  const std::string latest_tmp = dir_ + "/latest.tmp";
  bool had_old = false, renamed = false;
  // --- undo: nothing this save wrote stays; a copy it moved aside goes back ---
  auto undo = [&] {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::remove(latest_tmp, ec);
    if (renamed) fs::remove_all(final_dir, ec);
    if (had_old) fs::rename(old, final_dir, ec);
  };
  try {
    fs::create_directories(dir_);
    if (fresh) {  // a staged dir already holds the other ranks' shards
      fs::remove_all(tmp);
      fs::create_directories(tmp);
    }
    write_files(tmp);
    write_manifest(tmp, step, sharding_json);  // hashes and fsyncs every file
    fsync_dirs(tmp);
    if (before_commit) before_commit();
    // Re-saving a step (after a resume): move the old copy aside rather than deleting it
    // first, so `latest` never names a missing directory for longer than two renames (and
    // clean_incomplete puts it back after a crash between them); it goes once `latest` moved.
    had_old = fs::exists(final_dir);
    if (had_old) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    renamed = true;
    io::fsync_path(dir_);
    // --- move `latest` only now: it never names an incomplete checkpoint ---
    io::DurableFile::write_text(latest_tmp, name + "\n");
    fs::rename(latest_tmp, dir_ + "/latest");
  } catch (const std::exception& e) {
    // What went wrong, as errno: ours and std::filesystem's carry it; for the caller's own
    // writes (torch's archive writer reports "file write failed") errno still holds the
    // write's, and a file system with no space left confirms it.
    int err = errno;
    if (auto* w = dynamic_cast<const io::FileWriteError*>(&e)) err = w->err;
    if (auto* f = dynamic_cast<const fs::filesystem_error*>(&e)) err = f->code().value();
    struct statvfs sv {};
    const bool full = ::statvfs(dir_.c_str(), &sv) == 0 && std::uint64_t(sv.f_bavail) * sv.f_frsize < (64u << 10);
    if (err != ENOSPC && err != EDQUOT && full) err = ENOSPC;
    undo();
    const auto* own = dynamic_cast<const Error*>(&e);
    if (own && !dynamic_cast<const SystemError*>(&e)) throw;  // the caller's typed error, as it was
    const auto prev = read_file(dir_ + "/latest");
    const std::string still = prev ? "`latest` still names " + trim(*prev) : "no checkpoint was saved before";
    const bool io_errno = err == ENOSPC || err == EDQUOT || err == EIO || err == EROFS || err == EFBIG;
    const bool known =
        io_errno || dynamic_cast<const io::FileWriteError*>(&e) || dynamic_cast<const fs::filesystem_error*>(&e);
    throw SystemError(
        known ? fmt::format("checkpoint save failed: {} ({} in {}: {}; {})", std::strerror(err), name, dir_,
                            first_line(e.what()), still)
              : fmt::format("checkpoint save failed: {} ({} in {}; {})", first_line(e.what()), name, dir_, still),
        err == ENOSPC || err == EDQUOT
            ? "free space on the run dir's file system (or use a --run-dir on a larger one), then --resume auto "
              "continues from `latest`"
            : "check the run dir's file system; --resume auto continues from `latest`");
  } catch (...) {
    undo();
    throw;
  }
  // --- committed: `latest` names the new checkpoint ---
  std::error_code ec;
  io::fsync_path(dir_);
  if (had_old) fs::remove_all(old, ec);
  // --- prune: keep the newest `keep_` up to this step ---
  // Steps above this one are from before a resume from an earlier checkpoint (a fallback past
  // a damaged one, or a crash before `latest` moved): they do not count, and they are
  // replaced as the run reaches them. Counting them could prune the good ones instead.
  std::int64_t kept = 0;
  // Only what a save made: a real folder (a link named step_N is not followed nor removed) that
  // holds the COMPLETE marker every committed save writes (docs/decisions.md, what trainbox deletes).
  for (const auto& [n, other] : step_dirs(dir_)) {
    const fs::path p = dir_ + "/" + other;
    const bool saved = fs::symlink_status(p, ec).type() == fs::file_type::directory &&
                       fs::is_regular_file(fs::symlink_status(p / kCheckpointComplete, ec));
    if (saved && n <= step && ++kept > keep_) fs::remove_all(p, ec);  // what is not a save neither counts nor goes
  }
  return final_dir;
}

bool CheckpointStore::has_manifest(const std::string& checkpoint_dir) {
  return fs::exists(checkpoint_dir + "/" + kCheckpointManifest);
}

namespace {
struct ManifestEntry {
  std::string path, sha256;
  std::uint64_t bytes;
};
void problem(std::vector<CheckpointProblem>& problems, std::string file, std::string detail) {
  problems.push_back({std::move(file), std::move(detail)});
}
// Each file a manifest lists: present, a regular file, its size, its SHA-256.
void check_listed_files(const std::string& checkpoint_dir, const std::vector<ManifestEntry>& entries,
                        std::vector<CheckpointProblem>& problems) {
  for (const auto& e : entries) {
    const std::string path = checkpoint_dir + "/" + e.path;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      problem(problems, e.path, errno == ENOENT ? std::string("missing") : "cannot read: " + errno_text(errno));
      continue;
    }
    if (!S_ISREG(st.st_mode)) {
      problem(problems, e.path, "not a regular file");
      continue;
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size != e.bytes) {
      problem(
          problems, e.path,
          fmt::format("{} bytes, the manifest says {} ({})", size, e.bytes, size < e.bytes ? "truncated" : "grown"));
      continue;
    }
    const io::FileDigest d = io::sha256_file(path, /*sync=*/false);
    if (d.err)
      problem(problems, e.path, "cannot read: " + errno_text(d.err));
    else if (d.sha256 != e.sha256)
      problem(problems, e.path,
              fmt::format("contents changed: sha256 {}…, the manifest says {}…", d.sha256.substr(0, 16),
                          e.sha256.substr(0, 16)));
  }
}
}  // namespace

std::vector<CheckpointProblem> CheckpointStore::verify(const std::string& checkpoint_dir) {
  std::vector<CheckpointProblem> problems;
  auto problem = [&](std::string file, std::string detail) {
    problems.push_back({std::move(file), std::move(detail)});
  };
  // --- COMPLETE: the step, and the manifest's checksum ---
  std::optional<std::string> manifest_sha;
  if (auto marker = read_file(checkpoint_dir + "/" + kCheckpointComplete)) {
    const auto lines = split(*marker, '\n');
    const auto dir_step = step_of(fs::path(checkpoint_dir).lexically_normal().filename().string());
    const auto marker_step = lines.empty() ? std::nullopt : step_of("step_" + lines[0]);
    if (!marker_step)
      problem(kCheckpointComplete, "damaged: its first line is not a step number");
    else if (dir_step && *dir_step != *marker_step)
      problem(kCheckpointComplete, fmt::format("says step {}, the directory is step_{}", *marker_step, *dir_step));
    if (lines.size() >= 2) {
      const auto words = split(lines[1], ' ');
      if (lines.size() == 2 && words.size() == 3 && words[0] == kCheckpointManifest && words[1] == "sha256" &&
          io::is_sha256_hex(words[2]))
        manifest_sha = words[2];
      else
        problem(kCheckpointComplete, "damaged: its second line is not \"MANIFEST.json sha256 <hex>\"");
    }
    if (!problems.empty()) return problems;
  }
  // --- the manifest itself ---
  const std::string manifest_path = checkpoint_dir + "/" + kCheckpointManifest;
  const auto text = read_file(manifest_path);
  if (!text) {
    if (manifest_sha) problem(kCheckpointManifest, "missing (COMPLETE records its checksum)");
    return problems;  // no manifest, none expected: a checkpoint from before manifests
  }
  if (manifest_sha) {
    if (auto actual = io::sha256_hex(*text); actual != *manifest_sha) {
      problem(kCheckpointManifest, fmt::format("contents changed: sha256 {}…, COMPLETE records {}…",
                                               actual.substr(0, 16), manifest_sha->substr(0, 16)));
      return problems;  // its entries cannot be trusted
    }
  }
  std::vector<ManifestEntry> entries;
  nlohmann::json sharding;  // a sharded checkpoint's layout (null: one file per kind)
  std::int64_t manifest_step = -1;
  try {
    const auto j = nlohmann::json::parse(*text);
    if (!j.is_object() || j.value("format", "") != kManifestFormat)
      throw std::runtime_error("not a trainbox checkpoint manifest");
    if (!j.contains("version") || !j["version"].is_number_integer()) throw std::runtime_error("no version");
    if (j["version"].get<std::int64_t>() != kManifestVersion)
      throw std::runtime_error(
          fmt::format("version {} (this trainbox reads version {})", j["version"].dump(), kManifestVersion));
    if (j.value("algorithm", "") != "sha256") throw std::runtime_error("algorithm is not sha256");
    const auto& files = j.at("files");
    if (!files.is_array()) throw std::runtime_error("\"files\" is not a list");
    if (j.contains("step") && j["step"].is_number_integer()) manifest_step = j["step"].get<std::int64_t>();
    if (j.contains("sharding")) sharding = j["sharding"];
    std::set<std::string> seen;
    for (const auto& f : files) {
      if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("bytes") ||
          !f["bytes"].is_number_unsigned() || !f.contains("sha256") || !f["sha256"].is_string())
        throw std::runtime_error("an entry lacks path, bytes or sha256");
      ManifestEntry e{f["path"].get<std::string>(), f["sha256"].get<std::string>(), f["bytes"].get<std::uint64_t>()};
      if (!safe_relative_path(e.path)) throw std::runtime_error("bad path \"" + printable(e.path) + "\"");
      if (!io::is_sha256_hex(e.sha256)) throw std::runtime_error("bad sha256 for " + printable(e.path));
      if (!seen.insert(e.path).second) throw std::runtime_error("lists " + printable(e.path) + " twice");
      entries.push_back(std::move(e));
    }
  } catch (const std::exception& e) {
    problem(kCheckpointManifest, "damaged: " + first_line(e.what(), 160));
    return problems;
  }
  // --- every file it lists: present, same size, same bytes ---
  check_listed_files(checkpoint_dir, entries, problems);
  if (problems.empty() && !sharding.is_null()) {
    std::set<std::string> listed;
    for (const auto& e : entries) listed.insert(e.path);
    for (auto& p : verify_sharding(checkpoint_dir, sharding, manifest_step, listed)) problems.push_back(std::move(p));
  }
  return problems;
}

std::vector<std::string> CheckpointStore::check_resumable(const std::string& checkpoint_dir) {
  if (!fs::is_directory(checkpoint_dir))
    throw DataError("checkpoint " + checkpoint_dir + " does not exist",
                    "pass a checkpoint dir such as <run_dir>/checkpoints/step_N, or --resume auto");
  if (const std::string why = why_not_resumable(checkpoint_dir); !why.empty())
    throw DataError("checkpoint " + checkpoint_dir + " " + why,
                    "resume from an earlier checkpoint (--resume <run_dir>/checkpoints/step_N), or --resume auto, "
                    "which picks the newest one that verifies");
  if (!has_manifest(checkpoint_dir)) return {unverified_note(checkpoint_dir)};
  return {};
}

bool is_run_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(fs::path(path) / "checkpoints", ec);
}

std::string resolve_checkpoint(const std::string& path, std::vector<std::string>* notes) {
  std::error_code ec;
  fs::path p(path);
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();  // "runs/x/checkpoints/"
  if (is_run_dir(path)) {
    if (auto dir = CheckpointStore(path, 1).latest(notes)) return *dir;
    throw DataError(fmt::format("run dir {} has no checkpoint yet", path),
                    "pass a run dir that finished at least one checkpoint, or <run_dir>/checkpoints/step_N");
  }
  fs::path pointer;
  if (fs::is_regular_file(p, ec) && p.filename() == "latest")
    pointer = p;
  else if (fs::is_directory(p, ec) && fs::is_regular_file(p / "latest", ec) && !fs::exists(p / kCheckpointComplete, ec))
    pointer = p / "latest";  // <run_dir>/checkpoints
  if (pointer.empty()) return path;
  const std::string named = trim(read_file(pointer.string()).value_or(""));
  if (!step_of(named))
    throw DataError(fmt::format("{} names \"{}\", which is not a checkpoint", pointer.string(), printable(named)),
                    "pass <run_dir>/checkpoints/step_N, or the run dir to take its newest checkpoint that verifies");
  return (pointer.parent_path() / named).string();
}

std::string run_dir_of_checkpoint(const std::string& checkpoint) {
  std::error_code ec;
  if (!fs::is_directory(checkpoint, ec))
    throw DataError(fmt::format("checkpoint {} does not exist", checkpoint),
                    "pass a checkpoint dir such as <run_dir>/checkpoints/step_N, a run dir, or --resume auto "
                    "with --run-dir");
  const fs::path c = fs::canonical(checkpoint, ec);
  if (ec || c.parent_path().filename() != "checkpoints")
    throw UsageError(fmt::format("checkpoint {} is not inside a run dir (<run_dir>/checkpoints/step_N), so the "
                                 "continued run has no run dir to write to",
                                 checkpoint),
                     "pass --run-dir DIR for the continued run");
  const fs::path run_dir = c.parent_path().parent_path();
  const fs::path rel = run_dir.lexically_relative(fs::canonical(fs::current_path(ec), ec));
  return !rel.empty() && *rel.begin() != ".." ? rel.string() : run_dir.string();
}

bool CheckpointStore::has_checkpoints() const {
  std::error_code ec;
  return fs::exists(dir_ + "/latest", ec) || !step_dirs(dir_).empty();
}

std::optional<std::string> CheckpointStore::latest(std::vector<std::string>* notes) const {
  // --- candidates: what `latest` names, then every step_N, newest first ---
  std::vector<std::string> order, rejected;  // rejected: "step_60 is damaged: model.pt: …"
  const auto pointer = read_file(dir_ + "/latest");
  if (pointer) {
    const std::string named = trim(*pointer);
    if (step_of(named))
      order.push_back(named);
    else
      rejected.push_back(fmt::format("`latest` names \"{}\", which is not a checkpoint", printable(named)));
  }
  for (const auto& [n, name] : step_dirs(dir_))
    if (order.empty() || name != order.front()) order.push_back(name);
  if (!pointer && order.empty()) return std::nullopt;  // a fresh run dir

  // --- the first that is complete and verifies ---
  for (const auto& name : order) {
    const std::string path = dir_ + "/" + name;
    std::error_code ec;
    if (!fs::is_directory(path, ec)) {
      rejected.push_back(name + " is missing (`latest` names it)");
      continue;
    }
    if (const std::string why = why_not_resumable(path); !why.empty()) {
      rejected.push_back(name + " " + why);
      continue;
    }
    if (notes) {
      for (const auto& r : rejected) notes->push_back("checkpoint " + r);
      if (!rejected.empty())
        notes->push_back(fmt::format("falling back to {}, the newest checkpoint that verifies", path));
      if (!has_manifest(path)) notes->push_back(unverified_note(path));
    }
    return path;
  }
  std::string why;
  for (const auto& r : rejected) why += (why.empty() ? "" : "; ") + r;
  throw DataError(fmt::format("no usable checkpoint in {}: {}", dir_, why),
                  "the files named were damaged after they were written (disk, copy); restore them from a copy, or "
                  "start over with a new --run-dir");
}

}  // namespace trainbox::train
