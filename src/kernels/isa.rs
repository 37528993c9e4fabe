//! The one CPU dispatch: which compilation of the vector kernels runs.
//!
//! Every kernel with a vector fast path is one body compiled more than once (or an explicit
//! intrinsics version tested against its portable definition), and every compilation gives
//! the portable path's bits. Which one runs is decided here, once per process:
//! [`Isa::detected`] reads the CPU's features the first time it is asked (a
//! [`std::sync::OnceLock`]), and every dispatching function either takes an [`Isa`] (the
//! `*_on(isa, …)` entry points, and the matmul scratch, which carries one) or asks
//! [`Isa::detected`]. Tests force each path by passing [`Isa::PORTABLE`] or
//! [`Isa::new`]`(Level::…)` explicitly.
//!
//! The levels are ordered: each includes the ones below it.
//! - [`Level::Portable`]: no target features; what every other level must equal.
//! - [`Level::Avx2`]: AVX2 and FMA (the AVX2 compilations, and the `fma` builds of torch's
//!   elementwise kernels and of the Box–Muller block).
//! - [`Level::Avx512`]: AVX-512F and AVX-512DQ on top of AVX2 and FMA (every CPU with
//!   AVX-512F that this crate targets has the other three; one that lacks one runs at the
//!   level below).
//!
//! An [`Isa`] value can only be made for a level this CPU supports, so a kernel may run the
//! compilation its level names without checking again (that is what makes the `unsafe`
//! calls of the dispatching functions sound).
//!
//! **Override.** The environment variable `SEEDSWEEP_ISA` (`portable`, `avx2` or `avx512`)
//! caps what [`Isa::detected`] returns, for debugging a result on a machine or in CI: every
//! level gives the same bits, so only the speed changes. A level above the CPU's is capped to
//! the CPU's, and an unknown value is ignored; both say so once on stderr.

use std::sync::OnceLock;

/// A dispatch level (see the module doc). Ordered: a higher level includes the lower ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// No target features.
    Portable,
    /// AVX2 and FMA.
    Avx2,
    /// AVX-512F and AVX-512DQ, with AVX2 and FMA.
    Avx512,
}

impl Level {
    /// Every level, lowest first.
    pub const ALL: [Level; 3] = [Level::Portable, Level::Avx2, Level::Avx512];

    /// The name `SEEDSWEEP_ISA` takes: `portable`, `avx2`, `avx512`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Portable => "portable",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
        }
    }

    /// The CPU features this level needs, as a reason to skip a test that needs them.
    pub fn needs(self) -> &'static str {
        match self {
            Level::Portable => "nothing",
            Level::Avx2 => "needs AVX2 and FMA",
            Level::Avx512 => "needs AVX-512F and AVX-512DQ",
        }
    }

    fn parse(s: &str) -> Option<Level> {
        Level::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(s.trim()))
    }
}

/// A dispatch level this CPU supports: proof, carried to a kernel, that the compilation it
/// names may run here. Made only by [`Isa::detected`], [`Isa::new`] and [`Isa::PORTABLE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Isa(Level);

impl Isa {
    /// The portable path, supported everywhere.
    pub const PORTABLE: Isa = Isa(Level::Portable);

    /// The highest level this CPU supports, capped by `SEEDSWEEP_ISA` (module doc); detected
    /// on the first call, a load afterwards.
    pub fn detected() -> Isa {
        static DETECTED: OnceLock<Isa> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            let cpu = cpu_level();
            let level = match std::env::var("SEEDSWEEP_ISA") {
                Err(_) => cpu,
                Ok(v) => match Level::parse(&v) {
                    Some(l) if l <= cpu => l,
                    Some(l) => {
                        eprintln!(
                            "seedsweep: SEEDSWEEP_ISA={} is more than this CPU supports; using {}",
                            l.name(),
                            cpu.name()
                        );
                        cpu
                    }
                    None => {
                        eprintln!(
                            "seedsweep: SEEDSWEEP_ISA={v:?} is not one of portable, avx2, \
                             avx512; using {}",
                            cpu.name()
                        );
                        cpu
                    }
                },
            };
            Isa(level)
        })
    }

    /// `level`, if this CPU supports it (whatever `SEEDSWEEP_ISA` says: tests force a path
    /// with this).
    pub fn new(level: Level) -> Option<Isa> {
        (level <= cpu_level()).then_some(Isa(level))
    }

    /// The level.
    pub fn level(self) -> Level {
        self.0
    }

    /// Whether the AVX2 and FMA compilations may run (level [`Level::Avx2`] or more).
    #[inline]
    pub fn avx2(self) -> bool {
        self.0 >= Level::Avx2
    }

    /// Whether the AVX-512 compilations may run (level [`Level::Avx512`]).
    #[inline]
    pub fn avx512(self) -> bool {
        self.0 >= Level::Avx512
    }
}

impl Default for Isa {
    /// [`Isa::detected`].
    fn default() -> Self {
        Isa::detected()
    }
}

/// The highest level the CPU supports (detected once).
fn cpu_level() -> Level {
    static CPU: OnceLock<Level> = OnceLock::new();
    *CPU.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma");
            if avx2 && has!("avx512f") && has!("avx512dq") {
                return Level::Avx512;
            }
            if avx2 {
                return Level::Avx2;
            }
        }
        Level::Portable
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_ordered_and_named() {
        assert!(Level::Portable < Level::Avx2 && Level::Avx2 < Level::Avx512);
        for l in Level::ALL {
            assert_eq!(Level::parse(l.name()), Some(l));
            assert_eq!(Level::parse(&l.name().to_uppercase()), Some(l));
        }
        assert_eq!(Level::parse("sse2"), None);
    }

    #[test]
    fn portable_is_always_supported_and_detection_is_supported() {
        assert_eq!(Isa::new(Level::Portable), Some(Isa::PORTABLE));
        let d = Isa::detected();
        assert_eq!(Isa::new(d.level()), Some(d));
        assert!(!Isa::PORTABLE.avx2() && !Isa::PORTABLE.avx512());
    }
}
