// trainbox/launch/error_file.h — torchrun's per-worker error file (TORCHELASTIC_ERROR_FILE).
//
// A worker that dies of an exception writes why into the file named by TORCHELASTIC_ERROR_FILE;
// the launcher reads it for the failure summary. The format is torch.distributed.elastic's
// (Python workers decorated with @record write it):
//   {"message": {"message": "ValueError: boom",
//                "extraInfo": {"py_callstack": "Traceback …", "timestamp": "1700000000"}}}
// and the older {"message": "…", "timestamp": 1700000000}. C++ workers write the same with
// trainbox::write_error_file() (util/errors.h), so torchrun reports them properly too.
//
//   if (auto err = read_error_file(path)) puts(err->message.c_str());   // "ValueError: boom"
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace trainbox::launch {

struct WorkerError {
  std::string message;         // "ValueError: boom"
  std::string traceback;       // extraInfo.py_callstack, "" when none
  std::int64_t timestamp = 0;  // seconds since the epoch, 0 when unknown
};

// nullopt when the file is missing or not in either format.
std::optional<WorkerError> read_error_file(const std::string& path);

}  // namespace trainbox::launch
