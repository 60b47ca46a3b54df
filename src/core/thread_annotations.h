// Clang's thread-safety analysis (-Wthread-safety): the locking rules of a class are
// annotations the compiler checks, not comments. GCC ignores them (the macros expand to
// nothing), so the ordinary build is unchanged; scripts/check-thread-safety.sh (ctest
// `thread_safety`) compiles the sources with clang to enforce them.
//
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_) = 0;        // read or written only with mu_ held
//   void Grow() REQUIRES(mu_);             // the caller holds mu_
//   int Count() const EXCLUDES(mu_);       // takes mu_ itself: the caller must not hold it
//
// std::mutex is not annotated in libstdc++: lock through moex::Mutex and MutexLock
// (core/mutex.h) for the analysis to see it.
#pragma once

#if defined(__clang__)
#define MOEX_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define MOEX_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) MOEX_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY MOEX_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) MOEX_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) MOEX_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) MOEX_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) MOEX_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) MOEX_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) MOEX_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) MOEX_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) MOEX_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) MOEX_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) MOEX_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) MOEX_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) MOEX_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) MOEX_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) MOEX_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) MOEX_THREAD_ANNOTATION(lock_returned(x))
// For code whose safety the analysis cannot follow; say why next to each use.
#define NO_THREAD_SAFETY_ANALYSIS MOEX_THREAD_ANNOTATION(no_thread_safety_analysis)
