//! The pairs of a small Hash read in place, on the one Ruby whose layout
//! this knows (3.1), after checking it against Ruby's own iteration.
//!
//! Ruby keeps a Hash of at most 8 pairs in a flat array (its "ar_table"),
//! which `rb_hash_stlike_foreach` walks calling a function per pair. On a
//! text event the walker reads 11 pairs in 3 Hashes, and that iteration
//! (about 30 instructions a pair inside Ruby, plus the indirect call) was
//! the largest single part of the processor's own cost. Read in place, a
//! pair costs a load and a comparison.
//!
//! The layout is not part of Ruby's API, so this is careful:
//! - It is used only on Ruby 3.1 (the headers the extension is built
//!   with say which; an extension only loads into the Ruby it was
//!   built for). Ruby 3.3 moved the table into the object; other versions
//!   use Ruby's iteration.
//! - When the extension loads, [`enabled`] builds Hashes of every shape
//!   (empty, 1 to 8 pairs, with deleted pairs, 9 pairs kept in Ruby's
//!   other table) and compares what [`pairs`] reads with `rb_hash_foreach`.
//!   Any difference (a Ruby patched or built differently) turns the
//!   direct read off for the life of the process.
//! - [`pairs`] reads nothing it cannot bound: a Hash in the other table, a
//!   bound above 8 or a missing table give None, and Ruby iterates.

use std::sync::OnceLock;

use rb_sys::{ruby_special_consts, VALUE};

/// What a deleted pair holds as its key (Ruby's `Qundef`).
pub const DELETED: VALUE = ruby_special_consts::RUBY_Qundef as VALUE;

/// Pairs of the flat table.
const MAX_PAIRS: usize = 8;

/// Whether this build knows the layout of the Ruby it is built for.
const KNOWN_LAYOUT: bool = rb_sys::RUBY_API_VERSION_MAJOR == 3 && rb_sys::RUBY_API_VERSION_MINOR == 1;

/// Ruby 3.1's `struct RHash`: flags, class, then the table pointer.
#[repr(C)]
struct RHash31 {
    flags: VALUE,
    klass: VALUE,
    ar: *const [VALUE; 2],
}

/// `FL_USER3`: the Hash is an st_table, not a flat table.
const ST_TABLE_FLAG: VALUE = 1 << (12 + 3);
/// `FL_USER8..11`: the flat table's bound (its pairs, deleted included).
const BOUND_SHIFT: u32 = 12 + 8;
const BOUND_MASK: VALUE = 0xF;

/// The flat table of `hash`, deleted pairs (key [`DELETED`]) included, or
/// None when Ruby must iterate it. Only call it once [`enabled`] said yes.
///
/// # Safety
///
/// `hash` is a live Hash that nothing changes while the slice is used (no
/// Ruby code runs meanwhile).
#[inline(always)]
pub unsafe fn pairs<'h>(hash: VALUE) -> Option<&'h [[VALUE; 2]]> {
    if !KNOWN_LAYOUT {
        return None;
    }
    // SAFETY: a Hash object is at least an RHash31 on Ruby 3.1.
    let h = unsafe { &*(hash as *const RHash31) };
    if h.flags & ST_TABLE_FLAG != 0 {
        return None;
    }
    let bound = ((h.flags >> BOUND_SHIFT) & BOUND_MASK) as usize;
    if bound == 0 {
        return Some(&[]);
    }
    if bound > MAX_PAIRS || h.ar.is_null() {
        return None;
    }
    // SAFETY: the flat table holds MAX_PAIRS pairs, `bound` of them used.
    Some(unsafe { std::slice::from_raw_parts(h.ar, bound) })
}

/// Whether [`pairs`] may be used: [`verified`], checked once. The first
/// call allocates Ruby objects: make it with the GVL held, outside any
/// read (the extension's init does).
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(verified)
}

/// True when [`pairs`] reads exactly what Ruby iterates, for Hashes of
/// every shape.
fn verified() -> bool {
    if !KNOWN_LAYOUT {
        return false;
    }
    // (pairs put in, keys deleted after): flat tables full, partly
    // deleted and empty again, and one past the flat table's size.
    const SHAPES: [(i64, &[i64]); 7] =
        [(0, &[]), (1, &[]), (3, &[1]), (8, &[]), (8, &[0, 5, 7]), (2, &[0, 1]), (9, &[3])];
    SHAPES.iter().all(|&(put, deleted)| {
        // SAFETY: GVL held (above); the Hash is ours and on this stack, so
        // the GC sees it while the others are built.
        unsafe {
            let hash = rb_sys::rb_hash_new();
            for i in 0..put {
                rb_sys::rb_hash_aset(
                    hash,
                    rb_sys::rb_int2inum(i as isize),
                    rb_sys::rb_int2inum(100 + i as isize),
                );
            }
            for &i in deleted {
                rb_sys::rb_hash_delete(hash, rb_sys::rb_int2inum(i as isize));
            }
            let mut expected = Listed::default();
            rb_sys::rb_hash_foreach(hash, Some(list_pair), &mut expected as *mut Listed as VALUE);
            let read = pairs(hash);
            // Keep `hash` visible to the GC until it has been read.
            std::hint::black_box(hash);
            match read {
                Some(read) => {
                    let live: Vec<[VALUE; 2]> = read.iter().copied().filter(|p| p[0] != DELETED).collect();
                    !expected.overflow && live == expected.pairs[..expected.len]
                }
                // Only a Hash past the flat table's size may be left to Ruby.
                None => put as usize > MAX_PAIRS,
            }
        }
    })
}

/// The pairs Ruby's iteration gave, in order.
#[derive(Default)]
struct Listed {
    pairs: [[VALUE; 2]; 16],
    len: usize,
    overflow: bool,
}

unsafe extern "C" fn list_pair(key: VALUE, value: VALUE, arg: VALUE) -> std::os::raw::c_int {
    // SAFETY: `arg` is the `&mut Listed` given to rb_hash_foreach above.
    let listed = unsafe { &mut *(arg as *mut Listed) };
    match listed.pairs.get_mut(listed.len) {
        Some(slot) => {
            *slot = [key, value];
            listed.len += 1;
        }
        None => listed.overflow = true,
    }
    rb_sys::st_retval::ST_CONTINUE as std::os::raw::c_int
}
