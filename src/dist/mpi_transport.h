// The message layer of expert parallelism: MPI (Open MPI from Debian) point-to-point byte
// messages between the ranks that `mpirun` starts, with a deadline on every wait, so a rank
// that dies or stops answering ends the run with an error naming it instead of a hang
// (docs/expert-parallel.md). MPI's own blocking calls spin without a deadline; here every
// wait polls with a short sleep, which also leaves the cores to the ranks that compute.
// Built without MPI (CMake found none), Start throws an Error that says so.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace moex::dist {

// Another rank failed, or did not answer within the deadline. The transport is then broken:
// at exit the process aborts the whole MPI job instead of waiting for the other ranks.
class RankFailure : public Error {
 public:
  using Error::Error;
};

// Message tags: requests to a worker rank, replies to rank 0, the start-up handshake.
enum class Tag : int { kRequest = 1, kReply = 2, kHandshake = 3 };

class MpiTransport {
 public:
  using Duration = std::chrono::duration<double>;

  // Starts MPI once per process (later calls return the same transport). At exit the
  // process finalizes MPI if MarkFinished was called, and otherwise aborts the whole job: a
  // rank that ends on an error (before the handshake, or with a rank that stopped answering)
  // must not wait in MPI_Finalize for ranks that wait for it. Calls may come from any one
  // thread at a time (MPI_THREAD_SERIALIZED). Throws Error when moex was built without MPI
  // or MPI fails.
  static MpiTransport& Start();
  // Whether Start has been called in this process.
  static bool Started();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool broken() const { return broken_; }

  // Sends are posted and completed separately, so rank 0 can compute its own experts while
  // its requests travel. `bytes` must stay alive and unchanged until Complete returns.
  int PostSend(int to, Tag tag, std::span<const std::byte> bytes);
  // Waits for a posted send to leave its buffer; throws RankFailure after `timeout`.
  void Complete(int send, Duration timeout, const std::string& what);
  // The next message from `from` with `tag`. Waits at most `timeout` (forever when empty),
  // then throws RankFailure naming the rank and `what`.
  std::vector<std::byte> Receive(int from, Tag tag, std::optional<Duration> timeout,
                                 const std::string& what);

  // Ends every rank of the job now (MPI_Abort) with exit status `code`.
  [[noreturn]] void Abort(int code);

  // The run ended as agreed (rank 0 released the workers; a worker was released): MPI may
  // be finalized at exit.
  void MarkFinished() { finished_ = true; }
  bool finished() const { return finished_; }

  // Marks the transport broken and returns the error to throw.
  RankFailure Broken(const std::string& message);

 private:
  MpiTransport() = default;
  struct Pending;
  int rank_ = 0;
  int size_ = 1;
  bool broken_ = false;
  bool finished_ = false;
  std::vector<std::unique_ptr<Pending>> sends_;  // Indexed by PostSend's handle.
};

}  // namespace moex::dist
