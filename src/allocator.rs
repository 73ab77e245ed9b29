//! The allocator the binary and the benches run with: mimalloc, as the
//! process's `malloc`.
//!
//! Admission work is mostly small, short-lived allocations (decoded JSON,
//! CEL values), which glibc malloc serves slowly. mimalloc is built with
//! its `override` feature, so it defines `malloc`, `free` and the rest for
//! the whole process, and the program allocates through the standard
//! system allocator, which calls plain `malloc` for every allocation
//! aligned to 16 bytes or less. (`mimalloc::MiMalloc` as the global
//! allocator would call `mi_malloc_aligned` for each one, whose fallback,
//! taken whenever a size class's free list runs dry, over-allocates sizes
//! that are not a power of two from the next class and so never refills
//! the class it was asked for: callgrind counted about a hundred such
//! allocations per `/mutate` round trip of the e2e bench.)

/// Makes mimalloc the allocator of the binary or bench that expands it.
///
/// A static library's object is linked only when something refers to it:
/// the expansion keeps a reference to mimalloc in the final binary, and so
/// its `malloc` replaces the C library's.
#[macro_export]
macro_rules! mimalloc_as_malloc {
    () => {
        #[global_allocator]
        static ALLOCATOR: std::alloc::System = std::alloc::System;
        #[used]
        static MIMALLOC_LINKED: fn(&$crate::allocator::MiMalloc) -> u32 =
            $crate::allocator::MiMalloc::version;
    };
}

pub use mimalloc::MiMalloc;
