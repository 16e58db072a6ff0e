#pragma once
// The user-space threads (fibers) comm::simulated runs its ranks on. Only one simulated thread runs at a time, so
// they need no thread of the operating system each: switching between fibers is a function call that swaps the
// callee-saved registers and the stack pointer (a few instructions on x86-64; ucontext elsewhere, which adds a
// system call for the signal mask), where handing a turn from one system thread to another costs tens of
// microseconds on a busy machine (a 1,024-rank ring all-reduce makes two million such hand-offs).
//
// Each fiber has its own stack (mapped with a guard page below it, so an overflow faults instead of corrupting a
// neighbour) and its own copy of the C++ runtime's exception state: fibers that share a system thread would
// otherwise share its stack of caught exceptions, and a fiber that blocks inside a catch block (a roll call after a
// timeout) would see another fiber's exception end its own. Under AddressSanitizer and ThreadSanitizer every switch
// is announced to the sanitizer (its fiber interface), so they follow the stacks.

#include <cxxabi.h>
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

#include "hitch/core/error.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define HITCH_SIMULATED_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HITCH_SIMULATED_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define HITCH_SIMULATED_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HITCH_SIMULATED_TSAN 1
#endif
#endif

#if defined(HITCH_SIMULATED_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(HITCH_SIMULATED_TSAN)
extern "C" {
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
}
#endif

#if defined(__x86_64__) && defined(__linux__) && !defined(HITCH_SIMULATED_UCONTEXT)
#define HITCH_SIMULATED_SWITCH_ASM 1
// hitch_simulated_switch(save, load): pushes the System V callee-saved registers and the x87 and SSE control words,
// stores the stack pointer in *save, loads `load` and pops the same from there. hitch_simulated_start is where a new
// fiber's first switch returns to: it calls r13(r12) and marks the end of the stack for unwinders. Each translation
// unit emits them in a COMDAT group, so the linker keeps one copy.
extern "C" void hitch_simulated_switch(void** save, void* load);
extern "C" void hitch_simulated_start();
asm(R"(
    .pushsection .text.hitch_simulated_switch,"axG",@progbits,hitch_simulated_switch,comdat
    .globl hitch_simulated_switch
    .hidden hitch_simulated_switch
    .type hitch_simulated_switch,@function
    .p2align 4
hitch_simulated_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size hitch_simulated_switch, .-hitch_simulated_switch
    .popsection
    .pushsection .text.hitch_simulated_start,"axG",@progbits,hitch_simulated_start,comdat
    .globl hitch_simulated_start
    .hidden hitch_simulated_start
    .type hitch_simulated_start,@function
    .p2align 4
hitch_simulated_start:
    .cfi_startproc
    .cfi_undefined rip
    movq %r12, %rdi
    callq *%r13
    ud2
    .cfi_endproc
    .size hitch_simulated_start, .-hitch_simulated_start
    .popsection
)");
#endif

namespace hitch::comm::detail {

/// The C++ runtime's per-thread exception state (libstdc++ and libc++abi lay it out alike): the stack of caught
/// exceptions and the count of uncaught ones.
struct exception_state {
    void* caught = nullptr;
    unsigned int uncaught = 0;
#if defined(__ARM_EABI_UNWINDER__)
    void* propagating = nullptr;
#endif
};

[[nodiscard]] inline void* exception_globals() noexcept { return abi::__cxa_get_globals(); }

/// One execution context: the system thread's own (the driver of a simulation), or a fiber with a stack of its own
/// that runs `entry(argument)` from its first switch on. `entry` must not return: it ends with exit_to().
class fiber {
public:
    /// The calling thread's own context.
    fiber() {
#if defined(HITCH_SIMULATED_ASAN)
        pthread_attr_t attr;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            void* base = nullptr;
            std::size_t size = 0;
            pthread_attr_getstack(&attr, &base, &size);
            pthread_attr_destroy(&attr);
            stack_bottom_ = base;
            stack_size_ = size;
        }
#endif
#if defined(HITCH_SIMULATED_TSAN)
        tsan_ = __tsan_get_current_fiber();
#endif
    }

    /// A fiber with a stack of `stack_bytes` (rounded up to whole pages).
    fiber(std::size_t stack_bytes, void (*entry)(void*), void* argument) : entry_(entry), argument_(argument) {
        const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
        const std::size_t usable = (stack_bytes + page - 1) / page * page;
        map_bytes_ = usable + page;
        void* m = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            throw comm_error("hitch::comm::simulated: could not map a stack of " + std::to_string(usable) +
                             " bytes for a simulated thread (simulated_options::stack_bytes)");
        map_ = m;
        mprotect(map_, page, PROT_NONE);  // the guard page: stacks grow down into it
        stack_bottom_ = static_cast<char*>(map_) + page;
        stack_size_ = usable;
#if defined(HITCH_SIMULATED_SWITCH_ASM)
        // The frame hitch_simulated_switch pops: control words, r15, r14, r13 (what to call), r12 (its argument),
        // rbx, rbp (0: the end of the frame chain), and the return address; 16-byte aligned where the call is made.
        auto* top = reinterpret_cast<std::uintptr_t*>((reinterpret_cast<std::uintptr_t>(stack_bottom_) + usable) &
                                                      ~std::uintptr_t{15});
        std::uintptr_t* frame = top - 10;
        frame[0] = std::uintptr_t{0x1f80} | (std::uintptr_t{0x037f} << 32);  // MXCSR and x87 control word defaults
        frame[1] = 0;
        frame[2] = 0;
        frame[3] = reinterpret_cast<std::uintptr_t>(&fiber::start);
        frame[4] = reinterpret_cast<std::uintptr_t>(this);
        frame[5] = 0;
        frame[6] = 0;
        frame[7] = reinterpret_cast<std::uintptr_t>(&hitch_simulated_start);
        stack_pointer_ = frame;
#else
        if (getcontext(&context_) != 0) {
            munmap(map_, map_bytes_);
            throw comm_error("hitch::comm::simulated: getcontext failed for a simulated thread");
        }
        context_.uc_stack.ss_sp = stack_bottom_;
        context_.uc_stack.ss_size = stack_size_;
        context_.uc_link = nullptr;
        const auto self = reinterpret_cast<std::uintptr_t>(this);
        // makecontext passes ints: the fiber's address travels in two halves.
        makecontext(&context_, reinterpret_cast<void (*)()>(&fiber::trampoline), 2,
                    static_cast<unsigned>(self & 0xffffffffu), static_cast<unsigned>(self >> 32));
#endif
#if defined(HITCH_SIMULATED_TSAN)
        tsan_ = __tsan_create_fiber(0);
        owns_tsan_ = true;
#endif
    }

    fiber(const fiber&) = delete;
    fiber& operator=(const fiber&) = delete;
    ~fiber() {
#if defined(HITCH_SIMULATED_TSAN)
        if (owns_tsan_) __tsan_destroy_fiber(tsan_);
#endif
        if (map_ != nullptr) munmap(map_, map_bytes_);
    }

    /// Leaves `from` (the running context) for `to`; returns when a switch comes back to `from`.
    static void switch_to(fiber& from, fiber& to) noexcept {
        hand_over(from, to);
#if defined(HITCH_SIMULATED_ASAN)
        __sanitizer_start_switch_fiber(&from.fake_stack_, to.stack_bottom_, to.stack_size_);
#endif
#if defined(HITCH_SIMULATED_TSAN)
        __tsan_switch_to_fiber(to.tsan_, 0);
#endif
#if defined(HITCH_SIMULATED_SWITCH_ASM)
        hitch_simulated_switch(&from.stack_pointer_, to.stack_pointer_);
#else
        swapcontext(&from.context_, &to.context_);
#endif
#if defined(HITCH_SIMULATED_ASAN)
        __sanitizer_finish_switch_fiber(from.fake_stack_, nullptr, nullptr);
#endif
    }

    /// Leaves `from` for good (its stack is no longer used) for `to`.
    [[noreturn]] static void exit_to(fiber& from, fiber& to) noexcept {
        hand_over(from, to);
#if defined(HITCH_SIMULATED_ASAN)
        __sanitizer_start_switch_fiber(nullptr, to.stack_bottom_, to.stack_size_);
#endif
#if defined(HITCH_SIMULATED_TSAN)
        __tsan_switch_to_fiber(to.tsan_, 0);
#endif
#if defined(HITCH_SIMULATED_SWITCH_ASM)
        hitch_simulated_switch(&from.stack_pointer_, to.stack_pointer_);
#else
        setcontext(&to.context_);
#endif
        std::terminate();  // nothing switches back to a fiber that has ended
    }

private:
    /// The exception state travels with the fiber: `from` keeps the thread's, `to` brings its own.
    static void hand_over(fiber& from, const fiber& to) noexcept {
        void* globals = exception_globals();
        std::memcpy(static_cast<void*>(&from.exceptions_), globals, sizeof(exception_state));
        std::memcpy(globals, static_cast<const void*>(&to.exceptions_), sizeof(exception_state));
    }

    /// A new fiber's first function.
    static void start(void* argument) {
        auto* self = static_cast<fiber*>(argument);
#if defined(HITCH_SIMULATED_ASAN)
        __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
        self->entry_(self->argument_);
        std::terminate();  // entry ends with exit_to()
    }
#if !defined(HITCH_SIMULATED_SWITCH_ASM)
    static void trampoline(unsigned low, unsigned high) {
        start(reinterpret_cast<void*>(static_cast<std::uintptr_t>(low) | (static_cast<std::uintptr_t>(high) << 32)));
    }
#endif

#if defined(HITCH_SIMULATED_SWITCH_ASM)
    void* stack_pointer_ = nullptr;
#else
    ucontext_t context_{};
#endif
    void (*entry_)(void*) = nullptr;
    void* argument_ = nullptr;
    void* map_ = nullptr;
    std::size_t map_bytes_ = 0;
    void* stack_bottom_ = nullptr;
    std::size_t stack_size_ = 0;
    exception_state exceptions_{};
    [[maybe_unused]] void* fake_stack_ = nullptr;
    [[maybe_unused]] void* tsan_ = nullptr;
    [[maybe_unused]] bool owns_tsan_ = false;
};

}  // namespace hitch::comm::detail
