//! Revealed accumulation orders: the exact summation tree of every output element of one
//! matmul role and shape, as `scripts/reveal_order.py` measures it with the FPRev method
//! (Xie, Gao, Wang, Xue, USENIX ATC 2025, arXiv 2411.00442), executed exactly.
//!
//! # Program syntax
//!
//! A program describes how `c = Σ_t a[t]·b[t]` over the reduction indices `0..red` is
//! evaluated, as a binary tree whose leaves are the terms:
//! - `[s..e]f`: the FMA chain `c = +0; c = fma(a[t], b[t], c)` for `t = s..e` (an
//!   accumulator register starting at +0, as MKL's kernels start);
//! - `[s..e]r`: the chain with rounded products `c = +0; c = fl(c + fl(a[t]·b[t]))`;
//! - `tr`: the single term `fl(a[t]·b[t])`;
//! - `tf`: term `t` entering its parent unrounded: `(tf Y)` is `fma(a[t], b[t], Y)`;
//! - `(X Y)`: `fl(X + Y)` (IEEE addition is commutative, so the order of X and Y is free),
//!   except that a fused leaf on either side makes it one FMA with the other side.
//!
//! Every index of `0..red` must appear exactly once. A program is compiled to a postfix list
//! and evaluated on a reused stack: nothing is allocated per element.

use super::isa::Isa;
use std::fmt;

/// The matmul roles of `F.linear(x, W)` (x `m×k`, W `n×k`) as autograd calls them, with the
/// layouts seedsweep's backend uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// `F.linear(x, W)`: `c (m×n) = a (m×k) · bᵀ`, `b` stored `n×k` (`matmul_nt`).
    Forward,
    /// `F.linear(x, W, bias)` (torch's `addmm`): as `Forward`, with the bias as the last term
    /// (reduction index `red − 1`, the term `1·bias[j]`); see [`RevealedMatmul::run_bias`].
    ForwardBias,
    /// `dy @ W`: `c (m×n) = a (m×k) · b (k×n)` (`matmul`).
    GradInput,
    /// `dy.t() @ x`: `c (m×n) = aᵀ · b`, `a` stored `k×m`, `b` `k×n` (`matmul_tn`).
    GradWeight,
}

impl Role {
    /// Parses `forward`, `grad-input` or `grad-weight`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "forward" => Some(Self::Forward),
            "forward-bias" => Some(Self::ForwardBias),
            "grad-input" => Some(Self::GradInput),
            "grad-weight" => Some(Self::GradWeight),
            _ => None,
        }
    }

    /// The name used in revealed files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Forward => "forward",
            Self::ForwardBias => "forward-bias",
            Self::GradInput => "grad-input",
            Self::GradWeight => "grad-weight",
        }
    }
}

/// One postfix instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Push the chain over `start..end` (FMA or rounded products).
    Chain { start: u16, end: u16, fused: bool },
    /// Push `fl(a[t]·b[t])`.
    Term(u16),
    /// Replace the top `y` by `fma(a[t], b[t], y)`.
    FmaTop(u16),
    /// Pop `y`, `x`; push `fl(x + y)`.
    Add,
}

/// A compiled element program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    ops: Vec<Op>,
    /// Largest stack depth it needs.
    depth: usize,
}

/// Why a program text is not valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramError(pub String);

impl fmt::Display for ProgramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parsed tree.
enum Node {
    Chain(usize, usize, bool),
    Leaf(usize, bool),
    Pair(Box<Node>, Box<Node>),
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> ProgramError {
        ProgramError(format!("{what} at byte {}", self.pos))
    }
    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos] == b' ' {
            self.pos += 1;
        }
    }
    fn number(&mut self) -> Result<usize, ProgramError> {
        let start = self.pos;
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        std::str::from_utf8(&self.s[start..self.pos])
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| self.err("expected an index"))
    }
    fn flag(&mut self) -> Result<bool, ProgramError> {
        let f = match self.s.get(self.pos) {
            Some(b'f') => true,
            Some(b'r') => false,
            _ => return Err(self.err("expected `f` (fused) or `r` (rounded)")),
        };
        self.pos += 1;
        Ok(f)
    }
    fn node(&mut self) -> Result<Node, ProgramError> {
        self.skip_ws();
        match self.s.get(self.pos) {
            Some(b'(') => {
                self.pos += 1;
                let a = self.node()?;
                let b = self.node()?;
                self.skip_ws();
                if self.s.get(self.pos) != Some(&b')') {
                    return Err(self.err("expected `)`"));
                }
                self.pos += 1;
                Ok(Node::Pair(Box::new(a), Box::new(b)))
            }
            Some(b'[') => {
                self.pos += 1;
                let s = self.number()?;
                if self.s.get(self.pos..self.pos + 2) != Some(b"..") {
                    return Err(self.err("expected `..`"));
                }
                self.pos += 2;
                let e = self.number()?;
                if self.s.get(self.pos) != Some(&b']') {
                    return Err(self.err("expected `]`"));
                }
                self.pos += 1;
                let f = self.flag()?;
                if e <= s {
                    return Err(self.err("empty chain"));
                }
                Ok(Node::Chain(s, e, f))
            }
            Some(c) if c.is_ascii_digit() => {
                let t = self.number()?;
                let f = self.flag()?;
                Ok(Node::Leaf(t, f))
            }
            _ => Err(self.err("expected `(`, `[` or an index")),
        }
    }
}

/// Emits postfix code for `n`; returns the stack depth it needs.
fn emit(n: &Node, ops: &mut Vec<Op>) -> usize {
    match n {
        Node::Chain(s, e, f) => {
            ops.push(Op::Chain {
                start: *s as u16,
                end: *e as u16,
                fused: *f,
            });
            1
        }
        Node::Leaf(t, _) => {
            ops.push(Op::Term(*t as u16));
            1
        }
        Node::Pair(a, b) => match (a.as_ref(), b.as_ref()) {
            (Node::Leaf(t, true), other) | (other, Node::Leaf(t, true)) => {
                let d = emit(other, ops);
                ops.push(Op::FmaTop(*t as u16));
                d
            }
            _ => {
                let da = emit(a, ops);
                let db = emit(b, ops);
                ops.push(Op::Add);
                da.max(db + 1)
            }
        },
    }
}

fn mark(n: &Node, seen: &mut [bool]) -> Result<(), ProgramError> {
    let mut visit = |t: usize| -> Result<(), ProgramError> {
        match seen.get_mut(t) {
            None => Err(ProgramError(format!(
                "index {t} is out of range 0..{}",
                seen.len()
            ))),
            Some(true) => Err(ProgramError(format!("index {t} appears twice"))),
            Some(s) => {
                *s = true;
                Ok(())
            }
        }
    };
    match n {
        Node::Chain(s, e, _) => (*s..*e).try_for_each(visit),
        Node::Leaf(t, _) => visit(*t),
        Node::Pair(a, b) => {
            mark(a, seen)?;
            mark(b, seen)
        }
    }
}

impl Program {
    /// Parses and checks a program over `red` terms (every index exactly once).
    pub fn parse(text: &str, red: usize) -> Result<Self, ProgramError> {
        if red == 0 || red > u16::MAX as usize {
            return Err(ProgramError(format!(
                "reduction length {red} is not allowed; allowed: 1..=65535"
            )));
        }
        let mut p = Parser {
            s: text.as_bytes(),
            pos: 0,
        };
        let node = p.node()?;
        p.skip_ws();
        if p.pos != p.s.len() {
            return Err(p.err("unexpected text after the program"));
        }
        let mut seen = vec![false; red];
        mark(&node, &mut seen)?;
        if let Some(t) = seen.iter().position(|s| !s) {
            return Err(ProgramError(format!("index {t} of 0..{red} is missing")));
        }
        let mut ops = Vec::new();
        let depth = emit(&node, &mut ops);
        Ok(Self { ops, depth })
    }

    /// The program of one FMA chain over `0..red` (MKL's one-thread order for `red <= 192`).
    pub fn fma_chain(red: usize) -> Self {
        Self {
            ops: vec![Op::Chain {
                start: 0,
                end: red as u16,
                fused: true,
            }],
            depth: 1,
        }
    }

    /// Stack depth the program needs.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Whether this is the plain one-thread order over `red` terms: one FMA chain
    /// (`[0..red]f`), or for a `forward-bias` entry (`bias`) that chain over the products
    /// followed by `+ bias` (`([0..k]f kr)`). Such elements equal the `cpu-fma` kernels.
    pub fn is_plain(&self, red: usize, bias: bool) -> bool {
        let k = if bias { red - 1 } else { red } as u16;
        let chain = Op::Chain {
            start: 0,
            end: k,
            fused: true,
        };
        match (bias, self.ops.as_slice()) {
            (false, [c]) => *c == chain || (k == 1 && *c == Op::Term(0)),
            (true, [c, Op::Term(t), Op::Add]) => *c == chain && *t == k,
            _ => false,
        }
    }

    /// Evaluates the program on the terms `a(t)·b(t)` (module doc), using `stack` (cleared;
    /// it grows to [`Program::depth`] once and is then reused).
    #[inline]
    pub fn eval(
        &self,
        a: impl Fn(usize) -> f32,
        b: impl Fn(usize) -> f32,
        stack: &mut Vec<f32>,
    ) -> f32 {
        stack.clear();
        for op in &self.ops {
            match *op {
                Op::Chain { start, end, fused } => {
                    let (s, e) = (start as usize, end as usize);
                    let mut c = 0.0f32;
                    for t in s..e {
                        c = if fused {
                            a(t).mul_add(b(t), c)
                        } else {
                            c + a(t) * b(t)
                        };
                    }
                    stack.push(c);
                }
                Op::Term(t) => stack.push(a(t as usize) * b(t as usize)),
                Op::FmaTop(t) => {
                    let y = stack.pop().unwrap_or(0.0);
                    stack.push(a(t as usize).mul_add(b(t as usize), y));
                }
                Op::Add => {
                    let y = stack.pop().unwrap_or(0.0);
                    let x = stack.pop().unwrap_or(0.0);
                    stack.push(x + y);
                }
            }
        }
        stack.pop().unwrap_or(0.0)
    }

    /// [`Program::eval`] in sixteen lanes at once: each lane takes the same IEEE operations
    /// in the same order (fused multiply-adds where `eval` uses `mul_add`, products then
    /// sums where it rounds them), so each lane is `eval` of its own operands, bit for bit.
    /// `a(t)` and `b(t)` give term t's operands of every lane; `stack` holds at least
    /// [`Program::depth`] registers.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn eval_lanes(
        &self,
        a: impl Fn(usize) -> std::arch::x86_64::__m512,
        b: impl Fn(usize) -> std::arch::x86_64::__m512,
        stack: &mut [std::arch::x86_64::__m512],
    ) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        let zero = _mm512_setzero_ps();
        let mut sp = 0;
        // `eval`'s pop: the top, or +0 on an empty stack.
        let pop = |stack: &[__m512], sp: &mut usize| {
            if *sp == 0 {
                zero
            } else {
                *sp -= 1;
                stack[*sp]
            }
        };
        for op in &self.ops {
            let v = match *op {
                Op::Chain { start, end, fused } => {
                    let mut c = zero;
                    for t in start as usize..end as usize {
                        c = if fused {
                            _mm512_fmadd_ps(a(t), b(t), c)
                        } else {
                            _mm512_add_ps(c, _mm512_mul_ps(a(t), b(t)))
                        };
                    }
                    c
                }
                Op::Term(t) => _mm512_mul_ps(a(t as usize), b(t as usize)),
                Op::FmaTop(t) => {
                    let y = pop(stack, &mut sp);
                    _mm512_fmadd_ps(a(t as usize), b(t as usize), y)
                }
                Op::Add => {
                    let y = pop(stack, &mut sp);
                    let x = pop(stack, &mut sp);
                    _mm512_add_ps(x, y)
                }
            };
            stack[sp] = v;
            sp += 1;
        }
        pop(stack, &mut sp)
    }
}

/// The programs of one (role, rows, red, cols) matmul: which program each output element runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevealedMatmul {
    /// Output rows.
    pub rows: usize,
    /// Reduction length.
    pub red: usize,
    /// Output columns.
    pub cols: usize,
    /// Distinct programs.
    pub programs: Vec<Program>,
    /// Program index of every element, row-major.
    pub grid: Vec<u16>,
    /// Row-major indices of the elements whose program is not plain ([`Program::is_plain`]).
    pub exceptions: Vec<u32>,
}

impl RevealedMatmul {
    /// The matmul of `programs` and `grid` (rows × cols); `bias` for a `forward-bias` entry.
    pub fn new(
        rows: usize,
        red: usize,
        cols: usize,
        programs: Vec<Program>,
        grid: Vec<u16>,
        bias: bool,
    ) -> Self {
        let plain: Vec<bool> = programs.iter().map(|p| p.is_plain(red, bias)).collect();
        let exceptions = (0..grid.len() as u32)
            .filter(|&i| !plain[grid[i as usize] as usize])
            .collect();
        Self {
            rows,
            red,
            cols,
            programs,
            grid,
            exceptions,
        }
    }

    /// Like [`RevealedMatmul::run`] (or [`RevealedMatmul::run_bias`] with `bias`), but only for
    /// the [`RevealedMatmul::exceptions`]: `c` must already hold the plain order's values.
    /// Where the CPU has AVX-512F, exceptions of one row that run the same program are
    /// evaluated sixteen at a time, one per lane ([`Program::eval_lanes`]: every lane takes
    /// the same IEEE operations as [`Program::eval`], so the same bits); `isa` says whether
    /// it does.
    #[allow(clippy::too_many_arguments)]
    pub fn run_exceptions(
        &self,
        isa: Isa,
        role: Role,
        a: &[f32],
        b: &[f32],
        bias: Option<&[f32]>,
        c: &mut [f32],
        stack: &mut Vec<f32>,
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            if self.exceptions.len() >= LANES && isa.avx512() {
                // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
                return unsafe { self.run_exceptions_avx512(role, a, b, bias, c, stack) };
            }
        }
        let _ = isa;
        self.run_exceptions_portable(role, a, b, bias, c, stack, &self.exceptions);
    }

    /// The definition of [`RevealedMatmul::run_exceptions`], for the exceptions `which`.
    #[allow(clippy::too_many_arguments)]
    fn run_exceptions_portable(
        &self,
        role: Role,
        a: &[f32],
        b: &[f32],
        bias: Option<&[f32]>,
        c: &mut [f32],
        stack: &mut Vec<f32>,
        which: &[u32],
    ) {
        let (m, n) = (self.rows, self.cols);
        for &e in which {
            let (i, j) = (e as usize / n, e as usize % n);
            let p = &self.programs[self.grid[e as usize] as usize];
            c[e as usize] = p.eval(
                |t| operand_a(role, bias, self.red, m, a, i, t),
                |t| operand_b(role, bias, self.red, n, b, j, t),
                stack,
            );
        }
    }

    /// [`RevealedMatmul::run_exceptions`] sixteen lanes at a time: runs of up to 16
    /// consecutive exceptions in one row with one program, their `b` operands laid out term
    /// by term in `stack` (16 floats per term, a missing lane 0), `a`'s broadcast (one row).
    /// Lanes past a short run compute on zeros and are not stored. A program deeper than
    /// [`MAX_LANE_DEPTH`] runs the portable way.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_exceptions_avx512(
        &self,
        role: Role,
        a: &[f32],
        b: &[f32],
        bias: Option<&[f32]>,
        c: &mut [f32],
        stack: &mut Vec<f32>,
    ) {
        use std::arch::x86_64::*;
        let (m, n, red) = (self.rows, self.cols, self.red);
        let ex = &self.exceptions;
        let mut lanes = [_mm512_setzero_ps(); MAX_LANE_DEPTH];
        let mut s = 0;
        while s < ex.len() {
            let e0 = ex[s] as usize;
            let (i, prog) = (e0 / n, self.grid[e0]);
            let mut cnt = 1;
            while cnt < LANES
                && s + cnt < ex.len()
                && ex[s + cnt] as usize / n == i
                && self.grid[ex[s + cnt] as usize] == prog
            {
                cnt += 1;
            }
            let run = &ex[s..s + cnt];
            s += cnt;
            let p = &self.programs[prog as usize];
            if p.depth > MAX_LANE_DEPTH {
                self.run_exceptions_portable(role, a, b, bias, c, stack, run);
                continue;
            }
            stack.clear();
            stack.resize(red * LANES, 0.0);
            for (l, &e) in run.iter().enumerate() {
                let j = e as usize % n;
                for t in 0..red {
                    stack[t * LANES + l] = operand_b(role, bias, red, n, b, j, t);
                }
            }
            let bt = stack.as_ptr();
            let r = p.eval_lanes(
                |t| _mm512_set1_ps(operand_a(role, bias, red, m, a, i, t)),
                // SAFETY: t < red, and `stack` holds red · LANES floats.
                |t| _mm512_loadu_ps(bt.add(t * LANES)),
                &mut lanes,
            );
            let mut out = [0.0f32; LANES];
            _mm512_storeu_ps(out.as_mut_ptr(), r);
            for (&e, &v) in run.iter().zip(&out) {
                c[e as usize] = v;
            }
        }
    }

    /// `c (rows×cols)` of `role` with the operands stored as [`Role`] says, every element by
    /// its own program. `stack` is reused.
    pub fn run(&self, role: Role, a: &[f32], b: &[f32], c: &mut [f32], stack: &mut Vec<f32>) {
        let (m, k, n) = (self.rows, self.red, self.cols);
        for i in 0..m {
            for j in 0..n {
                let p = &self.programs[self.grid[i * n + j] as usize];
                c[i * n + j] = match role {
                    Role::Forward | Role::ForwardBias => {
                        p.eval(|t| a[i * k + t], |t| b[j * k + t], stack)
                    }
                    Role::GradInput => p.eval(|t| a[i * k + t], |t| b[t * n + j], stack),
                    Role::GradWeight => p.eval(|t| a[t * m + i], |t| b[t * n + j], stack),
                };
            }
        }
    }
}

/// Exceptions evaluated at once by [`RevealedMatmul::run_exceptions`] (f32 lanes of a
/// 512-bit register).
const LANES: usize = 16;

/// Deepest program [`Program::eval_lanes`] evaluates (its stack of registers).
pub const MAX_LANE_DEPTH: usize = 32;

/// Term t's `a` operand of output row i under `role` (the layouts of [`Role`]; `bias`: a
/// [`Role::ForwardBias`] entry's last term is `1·bias[j]`).
#[inline(always)]
fn operand_a(
    role: Role,
    bias: Option<&[f32]>,
    red: usize,
    m: usize,
    a: &[f32],
    i: usize,
    t: usize,
) -> f32 {
    match (role, bias) {
        (Role::ForwardBias, Some(_)) => {
            let k = red - 1;
            if t < k {
                a[i * k + t]
            } else {
                1.0
            }
        }
        (Role::Forward | Role::ForwardBias | Role::GradInput, _) => a[i * red + t],
        (Role::GradWeight, _) => a[t * m + i],
    }
}

/// Term t's `b` operand of output column j under `role` (see [`operand_a`]).
#[inline(always)]
fn operand_b(
    role: Role,
    bias: Option<&[f32]>,
    red: usize,
    n: usize,
    b: &[f32],
    j: usize,
    t: usize,
) -> f32 {
    match (role, bias) {
        (Role::ForwardBias, Some(bb)) => {
            let k = red - 1;
            if t < k {
                b[j * k + t]
            } else {
                bb[j]
            }
        }
        (Role::Forward | Role::ForwardBias, _) => b[j * red + t],
        (Role::GradInput | Role::GradWeight, _) => b[t * n + j],
    }
}

impl RevealedMatmul {
    /// `F.linear(x, w, bias)` by a [`Role::ForwardBias`] entry: `x` is `rows × (red − 1)`, `w`
    /// is `cols × (red − 1)`, and term `red − 1` of element (i, j) is `1·bias[j]` (exact).
    pub fn run_bias(
        &self,
        x: &[f32],
        w: &[f32],
        bias: &[f32],
        c: &mut [f32],
        stack: &mut Vec<f32>,
    ) {
        let (m, k, n) = (self.rows, self.red - 1, self.cols);
        for i in 0..m {
            for j in 0..n {
                let p = &self.programs[self.grid[i * n + j] as usize];
                c[i * n + j] = p.eval(
                    |t| if t < k { x[i * k + t] } else { 1.0 },
                    |t| if t < k { w[j * k + t] } else { bias[j] },
                    stack,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run1(text: &str, a: &[f32], b: &[f32]) -> f32 {
        let p = Program::parse(text, a.len()).unwrap();
        p.eval(|t| a[t], |t| b[t], &mut Vec::new())
    }

    #[test]
    fn chains_and_trees_round_where_they_say() {
        // a·a = 1 + 2^-11 + 2^-24 needs 25 bits: rounded it is 1 + 2^-11 (ties to even).
        let x = 1.0 + 2f32.powi(-12);
        let neg = -(1.0 + 2f32.powi(-11));
        let (a, b) = ([neg, x], [1.0, x]);
        assert_eq!(run1("[0..2]f", &a, &b), 2f32.powi(-24));
        assert_eq!(run1("[0..2]r", &a, &b), 0.0);
        assert_eq!(run1("(0r 1f)", &a, &b), 2f32.powi(-24));
        assert_eq!(run1("(1f 0r)", &a, &b), 2f32.powi(-24));
        assert_eq!(run1("(0r 1r)", &a, &b), 0.0);
        // Swamping: 2^40 − 2^40 + ones. The tree decides which ones survive.
        let big = 2f32.powi(40);
        let a = [big, 1.0, -big, 1.0];
        let b = [1.0; 4];
        assert_eq!(run1("[0..4]f", &a, &b), 1.0); // ((M + 1) − M) + 1
        assert_eq!(run1("((0r 2r) (1r 3r))", &a, &b), 2.0);
        assert_eq!(run1("(([0..2]r 3r) 2r)", &a, &b), 0.0);
    }

    #[test]
    fn programs_equal_independent_f64_references() {
        // A fused chain is c = fma(a_t, b_t, c): the exact f64 value of each step (24-bit
        // products are exact in f64, and here the sums of 3 such are too: small integers
        // times powers of two), rounded once per step.
        let a = [3.0f32, 0.5, -1.25, 7.0, 0.125];
        let b = [2.0f32, -4.0, 8.0, 0.25, 16.0];
        let mut c = 0.0f64;
        for t in 0..5 {
            c = ((a[t] as f64) * (b[t] as f64) + c) as f32 as f64;
        }
        assert_eq!(run1("[0..5]f", &a, &b) as f64, c);
        assert_eq!(
            run1("(([0..2]f [2..4]r) 4r)", &a, &b),
            (6.0 - 2.0) + (-10.0 + 1.75) + 2.0
        );
    }

    #[test]
    fn bad_programs_say_what_is_wrong() {
        for (text, red, want) in [
            ("[0..3]f", 4, "index 3 of 0..4 is missing"),
            ("([0..2]f 1r)", 2, "index 1 appears twice"),
            ("([0..2]f 5r)", 3, "index 5 is out of range"),
            ("[0..2]x", 2, "expected `f` (fused) or `r`"),
            ("([0..2]f", 2, "expected `(`, `[` or an index"),
            ("[0..2]f 2r", 3, "unexpected text"),
            ("[2..2]f", 3, "empty chain"),
        ] {
            let e = Program::parse(text, red).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn a_revealed_matmul_runs_each_element_by_its_program_in_each_layout() {
        // 2×3 output, red 3: element (1, 2) rounds its products, the rest chain with FMA.
        let progs = vec![
            Program::parse("[0..3]f", 3).unwrap(),
            Program::parse("[0..3]r", 3).unwrap(),
        ];
        let rm = RevealedMatmul::new(2, 3, 3, progs, vec![0, 0, 0, 0, 0, 1], false);
        assert_eq!(rm.exceptions, vec![5]);
        let x = 1.0 + 2f32.powi(-12);
        let neg = -(1.0 + 2f32.powi(-11));
        // Logical A (2×3) and B (3×3): every element is neg·1 + x·x + 0·0.
        let a = [neg, x, 0.0, neg, x, 0.0];
        let b = [1.0, 1.0, 1.0, x, x, x, 0.0, 0.0, 0.0];
        let want = [
            2f32.powi(-24),
            2f32.powi(-24),
            2f32.powi(-24),
            2f32.powi(-24),
            2f32.powi(-24),
            0.0,
        ];
        let mut stack = Vec::new();
        let mut c = [9.0f32; 6];
        rm.run(Role::GradInput, &a, &b, &mut c, &mut stack);
        assert_eq!(c, want);
        // Forward: b stored n×k (bᵀ).
        let bt: Vec<f32> = (0..9).map(|i| b[(i % 3) * 3 + i / 3]).collect();
        rm.run(Role::Forward, &a, &bt, &mut c, &mut stack);
        assert_eq!(c, want);
        // Grad-weight: a stored k×m (aᵀ).
        let at: Vec<f32> = (0..6).map(|i| a[(i % 2) * 3 + i / 2]).collect();
        rm.run(Role::GradWeight, &at, &b, &mut c, &mut stack);
        assert_eq!(c, want);
    }
}
