#include "dist/mpi_transport.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "core/clock.h"

#ifdef MOEX_HAVE_MPI
// The C interface only: Open MPI's deprecated C++ bindings do not compile warnings-clean.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace moex::dist {

namespace {
MpiTransport* g_transport = nullptr;
}  // namespace

#ifdef MOEX_HAVE_MPI

namespace {

// Polls `done` until it holds or `deadline` passes: a few yields first (a reply on
// loopback takes microseconds), then sleeps growing to 200 us, so a waiting rank leaves the
// cores to the ranks that compute. Returns false on timeout.
template <typename Done>
bool PollUntil(Done done, std::optional<Clock::time_point> deadline) {
  std::chrono::microseconds nap(0);
  for (int spins = 0; !done(); ++spins) {
    if (deadline && Clock::now() > *deadline) return false;
    if (spins < 64) {
      std::this_thread::yield();
      continue;
    }
    nap = std::min(std::chrono::microseconds(200), nap + std::chrono::microseconds(10));
    std::this_thread::sleep_for(nap);
  }
  return true;
}

std::string SecondsText(double s) {
  std::ostringstream out;
  out << s << " s";
  return out.str();
}

std::optional<Clock::time_point> DeadlineAfter(std::optional<MpiTransport::Duration> timeout) {
  if (!timeout) return std::nullopt;
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(*timeout);
}

}  // namespace

struct MpiTransport::Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  int to = 0;
};

namespace {

void CheckMpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw g_transport->Broken(std::string(call) + " failed: " + std::string(text, length));
}

void FinishAtExit() {
  if (g_transport == nullptr) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // A run that did not end as agreed has ranks that will never arrive: end them all rather
  // than wait in MPI_Finalize, which synchronises with every rank.
  if (g_transport->broken() || !g_transport->finished()) {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
}

}  // namespace

MpiTransport& MpiTransport::Start() {
  if (g_transport != nullptr) return *g_transport;
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    Fail("MPI_Init_thread failed");
  g_transport = new MpiTransport();
  std::atexit(FinishAtExit);
  if (provided < MPI_THREAD_SERIALIZED) {
    g_transport->broken_ = true;
    Fail(
        "this MPI library does not allow calls from more than one thread "
        "(MPI_THREAD_SERIALIZED), which the server needs");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_transport->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &g_transport->size_);
  return *g_transport;
}

int MpiTransport::PostSend(int to, Tag tag, std::span<const std::byte> bytes) {
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    throw Broken("a message of " + std::to_string(bytes.size()) + " bytes to rank " +
                 std::to_string(to) + " is over MPI's 2 GiB count limit");
  auto pending = std::make_unique<Pending>();
  pending->to = to;
  CheckMpi(MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, to,
                     static_cast<int>(tag), MPI_COMM_WORLD, &pending->request),
           "MPI_Isend");
  for (size_t i = 0; i < sends_.size(); ++i)
    if (sends_[i] == nullptr) {
      sends_[i] = std::move(pending);
      return static_cast<int>(i);
    }
  sends_.push_back(std::move(pending));
  return static_cast<int>(sends_.size() - 1);
}

void MpiTransport::Complete(int send, Duration timeout, const std::string& what) {
  Pending& p = *sends_[static_cast<size_t>(send)];
  int code = MPI_SUCCESS;
  const bool done = PollUntil(
      [&] {
        int flag = 0;
        code = MPI_Test(&p.request, &flag, MPI_STATUS_IGNORE);
        return code != MPI_SUCCESS || flag != 0;
      },
      DeadlineAfter(timeout));
  const int to = p.to;
  if (!done) {
    // The request stays posted: the transport is broken and the job ends at exit.
    sends_[static_cast<size_t>(send)].release();
    throw Broken("rank " + std::to_string(to) + " did not take " + what + " within " +
                 SecondsText(timeout.count()));
  }
  sends_[static_cast<size_t>(send)].reset();
  CheckMpi(code, "MPI_Isend");
}

std::vector<std::byte> MpiTransport::Receive(int from, Tag tag, std::optional<Duration> timeout,
                                             const std::string& what) {
  MPI_Status status;
  int code = MPI_SUCCESS;
  const bool arrived = PollUntil(
      [&] {
        int flag = 0;
        code = MPI_Iprobe(from, static_cast<int>(tag), MPI_COMM_WORLD, &flag, &status);
        return code != MPI_SUCCESS || flag != 0;
      },
      DeadlineAfter(timeout));
  if (!arrived)
    throw Broken("rank " + std::to_string(from) + " did not answer " + what + " within " +
                 SecondsText(timeout->count()));
  CheckMpi(code, "MPI_Iprobe");
  int count = 0;
  CheckMpi(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
  std::vector<std::byte> bytes(static_cast<size_t>(count));
  CheckMpi(MPI_Recv(bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, static_cast<int>(tag),
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE),
           "MPI_Recv");
  return bytes;
}

void MpiTransport::Abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

bool MpiTransport::Started() {
  return g_transport != nullptr;
}

#else  // Built without MPI.

struct MpiTransport::Pending {};

MpiTransport& MpiTransport::Start() {
  Fail(
      "this moex was built without MPI, which expert parallelism needs: install Open MPI "
      "(Debian: libopenmpi-dev openmpi-bin) and build again");
}
bool MpiTransport::Started() {
  return g_transport != nullptr;
}
int MpiTransport::PostSend(int, Tag, std::span<const std::byte>) {
  Fail("no MPI");
}
void MpiTransport::Complete(int, Duration, const std::string&) {
  Fail("no MPI");
}
std::vector<std::byte> MpiTransport::Receive(int, Tag, std::optional<Duration>,
                                             const std::string&) {
  Fail("no MPI");
}
void MpiTransport::Abort(int code) {
  std::_Exit(code);
}

#endif

RankFailure MpiTransport::Broken(const std::string& message) {
  broken_ = true;
  return RankFailure(message);
}

}  // namespace moex::dist
