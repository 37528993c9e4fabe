//! The process's allocator: the system allocator, with every large block marked for
//! transparent huge pages on Linux (`madvise(MADV_HUGEPAGE)`).
//!
//! Why: a big-shape seed-run (V = 32,000, H = 512) touched 2.4 GB of fresh memory (0.75 GB
//! now), and
//! on the VMs this runs on a 4 KiB page fault costs 1.5–8 µs, so faulting it in took as long
//! as the arithmetic. Where the kernel grants 2 MiB pages (THP `enabled` = `always` or
//! `madvise`) that is 512 times fewer faults; where it does not, the advice is ignored. No
//! value changes: this only decides how memory is mapped.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks of this many bytes or more are advised (smaller ones rarely span a whole aligned
/// 2 MiB page).
const ADVISE_FROM: usize = 4 << 20;

/// The system allocator plus the advice; see the module doc.
pub struct HugePageAlloc;

// SAFETY: every call is forwarded to `System` unchanged; `advise` only passes a range inside
// the block just returned to `madvise`, which changes no contents.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        advise(p, layout.size());
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        advise(p, layout.size());
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        advise(p, new_size);
        p
    }
}

/// Marks the whole 2 MiB pages inside `[p, p + len)` for huge pages (Linux; a no-op
/// elsewhere, for null and for small blocks). A refusal is ignored: it only means 4 KiB pages.
fn advise(p: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        if p.is_null() || len < ADVISE_FROM {
            return;
        }
        let start = (p as usize).div_ceil(HUGE) * HUGE;
        let end = (p as usize + len) / HUGE * HUGE;
        if end > start {
            // SAFETY: [start, end) lies inside the block just allocated; MADV_HUGEPAGE
            // changes how it is backed, never its contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (p, len, ADVISE_FROM);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advised_blocks_keep_their_contents_through_growth() {
        // The advice must not disturb values: through this allocator (the binary's global
        // one; tests run on the system allocator), fill an advised block, grow it twice
        // past ADVISE_FROM, and read every value back; a zeroed block reads as zeros.
        let words = |bytes: usize| bytes / 8;
        let pattern = |i: usize| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let a = HugePageAlloc;
        let mut size = ADVISE_FROM + 12_345 * 8;
        let mut layout = Layout::from_size_align(size, 8).unwrap();
        // SAFETY: the block is used within its layout and freed with it.
        unsafe {
            let mut p = a.alloc(layout) as *mut u64;
            assert!(!p.is_null());
            for i in 0..words(size) {
                p.add(i).write(pattern(i));
            }
            for grow in [3, 7] {
                let new = size * grow;
                p = a.realloc(p as *mut u8, layout, new) as *mut u64;
                assert!(!p.is_null());
                assert!((0..words(size)).all(|i| p.add(i).read() == pattern(i)));
                for i in words(size)..words(new) {
                    p.add(i).write(pattern(i));
                }
                size = new;
                layout = Layout::from_size_align(size, 8).unwrap();
            }
            assert!((0..words(size)).all(|i| p.add(i).read() == pattern(i)));
            a.dealloc(p as *mut u8, layout);
            let z = Layout::from_size_align(5 * ADVISE_FROM, 64).unwrap();
            let q = a.alloc_zeroed(z);
            assert!(!q.is_null() && (q as usize).is_multiple_of(64));
            assert!((0..z.size()).all(|i| q.add(i).read() == 0));
            a.dealloc(q, z);
        }
    }
}
