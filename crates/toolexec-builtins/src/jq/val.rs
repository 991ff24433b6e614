//! [`SVal`]: jaq's JSON value with a nesting bound and resource accounting.
//!
//! Every value operation jaq performs goes through this wrapper, which
//!
//! - tracks an upper bound of the value's nesting depth, in O(1) per
//!   operation, and refuses values deeper than [`MAX_VALUE_DEPTH`] — so the
//!   recursive code in jaq (comparison, printing, dropping) can never
//!   overflow the stack;
//! - refuses strings longer than [`MAX_STRING_BYTES`] and integers wider than
//!   [`MAX_INT_BITS`] *before* they are allocated (`"x" * 1e15` would
//!   otherwise abort the process on allocation failure);
//! - charges allocations to the filter's memory budget;
//! - checks for cancellation ([`super::guard::check`]).
//!
//! Operations delegate to [`jaq_json::Val`] for the actual semantics.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::ops::{Add, Div, Mul, Neg, Rem, Sub};

use jaq_core::box_iter::BoxIter;
use jaq_core::path::Opt;
use jaq_core::val::Range;
use jaq_core::{Error, Exn, ValR, ValX};
use jaq_json::{Num, Rc, Val};

use super::guard::{Interrupt, charge, check, interrupt};
use super::{MAX_INT_BITS, MAX_STRING_BYTES, MAX_VALUE_DEPTH};

/// Estimated heap cost of one array element.
pub(crate) const ELEM: usize = std::mem::size_of::<Val>();
/// Estimated heap cost of one object entry (key, value, hash and index).
pub(crate) const ENTRY: usize = 3 * ELEM;

/// A jaq value plus an upper bound of its nesting depth (scalars: 0).
#[derive(Clone, Debug, Default)]
pub(crate) struct SVal {
    pub(crate) v: Val,
    pub(crate) d: u32,
}

impl SVal {
    /// A value of depth `d`; stops the filter if that is too deep.
    pub(crate) fn new(v: Val, d: u32) -> Self {
        if d > MAX_VALUE_DEPTH {
            interrupt(Interrupt::Depth);
        }
        SVal { v, d }
    }

    /// A scalar (or string) value.
    pub(crate) fn scalar(v: Val) -> Self {
        SVal { v, d: 0 }
    }

    /// Wraps any value, computing its depth (bounded by the recursion it
    /// does: only use on values built from checked parts).
    pub(crate) fn exact(v: Val) -> Self {
        let d = depth_of(&v);
        SVal::new(v, d)
    }

    fn child_depth(&self) -> u32 {
        self.d.saturating_sub(1)
    }
}

/// The exact nesting depth of a value.
pub(crate) fn depth_of(v: &Val) -> u32 {
    match v {
        Val::Arr(a) => 1 + a.iter().map(depth_of).max().unwrap_or(0),
        Val::Obj(o) => {
            1 + o
                .iter()
                .map(|(k, v)| depth_of(k).max(depth_of(v)))
                .max()
                .unwrap_or(0)
        }
        _ => 0,
    }
}

/// Writes into a string, failing once it would pass [`MAX_STRING_BYTES`].
struct Bounded(String);

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.0.len() + s.len() > MAX_STRING_BYTES {
            return Err(fmt::Error);
        }
        self.0.push_str(s);
        Ok(())
    }
}

/// A value as compact JSON text (jaq's format), stopping the filter instead
/// of building a string over the limit.
pub(crate) fn to_json_string(v: &Val) -> String {
    use fmt::Write as _;
    let mut out = Bounded(String::new());
    if write!(out, "{v}").is_err() {
        interrupt(Interrupt::StringSize);
    }
    charge(out.0.len());
    out.0
}

/// Refuses strings over the limit and charges the rest.
pub(crate) fn charge_string(len: usize) {
    if len > MAX_STRING_BYTES {
        interrupt(Interrupt::StringSize);
    }
    charge(len);
}

/// What cloning the container inside `v` would cost if it is shared (jaq
/// copies shared arrays and objects before changing them).
fn unshare_cost(v: &Val) -> usize {
    match v {
        Val::Arr(a) if Rc::strong_count(a) > 1 => a.len() * ELEM,
        Val::Obj(o) if Rc::strong_count(o) > 1 => o.len() * ENTRY,
        _ => 0,
    }
}

fn container_cost(v: &Val) -> usize {
    match v {
        Val::Arr(a) => a.len() * ELEM,
        Val::Obj(o) => o.len() * ENTRY,
        _ => 0,
    }
}

/// Bits of an integer (0 for non-integers).
fn int_bits(n: &Num) -> u64 {
    match n {
        Num::Int(i) => u64::from(isize::BITS - i.unsigned_abs().leading_zeros()),
        Num::BigInt(b) => b.bits(),
        _ => 0,
    }
}

/// Converts an error of the inner value type.
pub(crate) fn lift_err(e: Error<Val>) -> Error<SVal> {
    Error::new(SVal::exact(e.into_val()))
}

fn lift(r: ValR<Val>, d: u32) -> ValR<SVal> {
    r.map(|v| SVal::new(v, d)).map_err(lift_err)
}

fn lift_exn<'a>(e: Exn<'a, Val>) -> Exn<'a, SVal> {
    match e.get_err() {
        Ok(e) => Exn::from(lift_err(e)),
        Err(e) => match e.get_halt() {
            Ok(code) => Exn::halt(code),
            Err(_) => Exn::from(Error::str("internal error: unexpected control flow")),
        },
    }
}

/// Runs an update of [`Val`] with a closure producing [`SVal`]s: outputs are
/// unwrapped (tracking their depth), and an exception of the closure, which
/// cannot be converted to `Val`'s type, is kept aside while a placeholder
/// error makes `Val` stop, then put back.
struct Smuggle<'a> {
    exn: RefCell<Option<Exn<'a, SVal>>>,
    depth: Cell<u32>,
}

impl<'a> Smuggle<'a> {
    fn new() -> Self {
        Smuggle {
            exn: RefCell::new(None),
            depth: Cell::new(0),
        }
    }

    fn wrap<I>(&self, it: I) -> impl Iterator<Item = ValX<'a, Val>>
    where
        I: Iterator<Item = ValX<'a, SVal>>,
    {
        it.map(move |r| match r {
            Ok(y) => {
                self.depth.set(self.depth.get().max(y.d));
                Ok(y.v)
            }
            Err(e) => {
                self.exn.borrow_mut().get_or_insert(e);
                Err(Exn::from(Error::new(Val::Null)))
            }
        })
    }

    fn finish(self, r: ValX<'a, Val>, depth: impl FnOnce(u32) -> u32) -> ValX<'a, SVal> {
        match r {
            Ok(v) => Ok(SVal::new(v, depth(self.depth.get()))),
            Err(e) => Err(match self.exn.into_inner() {
                Some(exn) => exn,
                None => lift_exn(e),
            }),
        }
    }
}

impl fmt::Display for SVal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.v.fmt(f)
    }
}

impl From<bool> for SVal {
    fn from(b: bool) -> Self {
        SVal::scalar(Val::from(b))
    }
}

impl From<isize> for SVal {
    fn from(i: isize) -> Self {
        SVal::scalar(Val::from(i))
    }
}

impl From<usize> for SVal {
    fn from(i: usize) -> Self {
        SVal::scalar(Val::from(i))
    }
}

impl From<f64> for SVal {
    fn from(f: f64) -> Self {
        SVal::scalar(Val::from(f))
    }
}

impl From<String> for SVal {
    fn from(s: String) -> Self {
        charge_string(s.len());
        SVal::scalar(Val::from(s))
    }
}

impl From<Range<SVal>> for SVal {
    fn from(r: Range<SVal>) -> Self {
        let d = 1 + r
            .start
            .as_ref()
            .map_or(0, |s| s.d)
            .max(r.end.as_ref().map_or(0, |e| e.d));
        SVal::new(Val::from(r.start.map(|s| s.v)..r.end.map(|e| e.v)), d)
    }
}

impl FromIterator<SVal> for SVal {
    fn from_iter<T: IntoIterator<Item = SVal>>(iter: T) -> Self {
        let mut d = 0;
        let mut uncharged = 0;
        let mut out = Vec::new();
        for x in iter {
            d = d.max(x.d);
            out.push(x.v);
            uncharged += 1;
            if uncharged == 1024 {
                charge(uncharged * ELEM);
                uncharged = 0;
            }
        }
        charge(uncharged * ELEM);
        SVal::new(Val::Arr(Rc::new(out)), d + 1)
    }
}

impl PartialEq for SVal {
    fn eq(&self, other: &Self) -> bool {
        check();
        self.v == other.v
    }
}

impl Eq for SVal {}

impl PartialOrd for SVal {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SVal {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        check();
        self.v.cmp(&other.v)
    }
}

impl Add for SVal {
    type Output = ValR<SVal>;
    fn add(self, rhs: Self) -> ValR<SVal> {
        match (&self.v, &rhs.v) {
            (Val::TStr(l) | Val::BStr(l), Val::TStr(r) | Val::BStr(r)) => {
                let total = l.len().saturating_add(r.len());
                if total > MAX_STRING_BYTES {
                    interrupt(Interrupt::StringSize);
                }
                // jaq appends in place to a string it owns alone.
                charge(if l.is_unique() { r.len() } else { total });
            }
            (Val::Arr(_), Val::Arr(_)) | (Val::Obj(_), Val::Obj(_)) => {
                charge(unshare_cost(&self.v) + container_cost(&rhs.v));
            }
            _ => check(),
        }
        let d = self.d.max(rhs.d);
        lift(self.v + rhs.v, d)
    }
}

impl Sub for SVal {
    type Output = ValR<SVal>;
    fn sub(self, rhs: Self) -> ValR<SVal> {
        charge(unshare_cost(&self.v) + container_cost(&rhs.v));
        let d = self.d;
        lift(self.v - rhs.v, d)
    }
}

impl Mul for SVal {
    type Output = ValR<SVal>;
    fn mul(self, rhs: Self) -> ValR<SVal> {
        match (&self.v, &rhs.v) {
            (Val::TStr(s) | Val::BStr(s), Val::Num(n))
            | (Val::Num(n), Val::TStr(s) | Val::BStr(s)) => {
                // jaq repeats the string n times (big integers saturate).
                let times = match n {
                    Num::Int(i) => usize::try_from(*i).unwrap_or(0),
                    Num::BigInt(_) if Val::Num(n.clone()) > Val::from(0isize) => usize::MAX,
                    _ => 0,
                };
                if !s.is_empty() {
                    charge_string(s.len().saturating_mul(times));
                }
            }
            (Val::Num(l), Val::Num(r)) => {
                if matches!((l, r), (Num::BigInt(_), _) | (_, Num::BigInt(_)))
                    && int_bits(l) + int_bits(r) > MAX_INT_BITS
                {
                    interrupt(Interrupt::IntSize);
                }
                check();
            }
            (Val::Obj(_), Val::Obj(_)) => charge(unshare_cost(&self.v) + container_cost(&rhs.v)),
            _ => check(),
        }
        let d = self.d.max(rhs.d);
        lift(self.v * rhs.v, d)
    }
}

impl Div for SVal {
    type Output = ValR<SVal>;
    fn div(self, rhs: Self) -> ValR<SVal> {
        let d = match (&self.v, &rhs.v) {
            (Val::TStr(s) | Val::BStr(s), Val::TStr(sep) | Val::BStr(sep)) => {
                // Splitting: at most one part per separator length.
                charge((s.len() / sep.len().max(1) + 1) * 3 * ELEM);
                1
            }
            _ => {
                check();
                0
            }
        };
        lift(self.v / rhs.v, d)
    }
}

impl Rem for SVal {
    type Output = ValR<SVal>;
    fn rem(self, rhs: Self) -> ValR<SVal> {
        check();
        lift(self.v % rhs.v, 0)
    }
}

impl Neg for SVal {
    type Output = ValR<SVal>;
    fn neg(self) -> ValR<SVal> {
        check();
        lift(-self.v, 0)
    }
}

impl jaq_core::ValT for SVal {
    fn from_num(n: &str) -> ValR<Self> {
        charge_string(n.len());
        lift(<Val as jaq_core::ValT>::from_num(n), 0)
    }

    fn from_map<I: IntoIterator<Item = (Self, Self)>>(iter: I) -> ValR<Self> {
        let mut d = 0;
        let mut uncharged = 0;
        let pairs = iter.into_iter().map(|(k, v)| {
            d = d.max(k.d).max(v.d);
            uncharged += 1;
            if uncharged == 1024 {
                charge(uncharged * ENTRY);
                uncharged = 0;
            }
            (k.v, v.v)
        });
        let r = <Val as jaq_core::ValT>::from_map(pairs);
        charge(uncharged * ENTRY);
        lift(r, d + 1)
    }

    fn key_values(self) -> BoxIter<'static, ValR<(Self, Self), Self>> {
        charge(unshare_cost(&self.v));
        let d = self.child_depth();
        Box::new(self.v.key_values().map(move |r| {
            r.map(|(k, v)| (SVal { v: k, d }, SVal { v, d }))
                .map_err(lift_err)
        }))
    }

    fn values(self) -> Box<dyn Iterator<Item = ValR<Self>>> {
        charge(unshare_cost(&self.v));
        let d = self.child_depth();
        Box::new(
            self.v
                .values()
                .map(move |r| r.map(|v| SVal { v, d }).map_err(lift_err)),
        )
    }

    fn index(self, index: &Self) -> ValR<Self> {
        check();
        let d = match (&self.v, &index.v) {
            (Val::Arr(a), Val::Arr(b)) => {
                // `.[[1,2]]` looks for a sub-array: quadratic, so checked.
                let found = super::natives::array_indices(a, b);
                return Ok(found.into_iter().map(SVal::from).collect());
            }
            (Val::Arr(_), Val::Num(_)) | (Val::Obj(_), _) => self.child_depth(),
            (_, Val::Obj(_)) => self.d,
            _ => 0,
        };
        lift(jaq_core::ValT::index(self.v, &index.v), d)
    }

    fn range(self, range: Range<&Self>) -> ValR<Self> {
        check();
        let d = self.d;
        let range = range.start.map(|s| &s.v)..range.end.map(|e| &e.v);
        let r = jaq_core::ValT::range(self.v, range);
        if let Ok(v) = &r {
            charge(container_cost(v));
        }
        lift(r, d)
    }

    fn map_values<'a, I: Iterator<Item = ValX<'a, Self>>>(
        self,
        opt: Opt,
        f: impl Fn(Self) -> I,
    ) -> ValX<'a, Self> {
        charge(unshare_cost(&self.v));
        let (d, child) = (self.d, self.child_depth());
        let smuggle = Smuggle::new();
        let r = self
            .v
            .map_values(opt, |v| smuggle.wrap(f(SVal { v, d: child })));
        if let Ok(v) = &r {
            charge(container_cost(v));
        }
        // All children were replaced; a non-container (opt) stays a scalar.
        smuggle.finish(r, |out| if d == 0 { 0 } else { out + 1 })
    }

    fn map_index<'a, I: Iterator<Item = ValX<'a, Self>>>(
        self,
        index: &Self,
        opt: Opt,
        f: impl Fn(Self) -> I,
    ) -> ValX<'a, Self> {
        charge(unshare_cost(&self.v));
        let d = self.d;
        let child = match (&self.v, &index.v) {
            // A range update (`.[start:end] |= f`) passes the slice.
            (Val::Arr(_), Val::Obj(_)) => d,
            _ => self.child_depth(),
        };
        let smuggle = Smuggle::new();
        let r = self
            .v
            .map_index(&index.v, opt, |x| smuggle.wrap(f(SVal { v: x, d: child })));
        let key = index.d;
        smuggle.finish(r, |out| d.max(1 + out.max(key)))
    }

    fn map_range<'a, I: Iterator<Item = ValX<'a, Self>>>(
        self,
        range: Range<&Self>,
        opt: Opt,
        f: impl Fn(Self) -> I,
    ) -> ValX<'a, Self> {
        charge(unshare_cost(&self.v));
        let d = self.d;
        let smuggle = Smuggle::new();
        let range = range.start.map(|s| &s.v)..range.end.map(|e| &e.v);
        let r = self
            .v
            .map_range(range, opt, |x| smuggle.wrap(f(SVal { v: x, d })));
        if let Ok(Val::TStr(s) | Val::BStr(s)) = &r {
            charge_string(s.len());
        }
        smuggle.finish(r, |out| d.max(out))
    }

    fn as_bool(&self) -> bool {
        jaq_core::ValT::as_bool(&self.v)
    }

    fn into_string(self) -> Self {
        check();
        match self.v {
            Val::TStr(b) | Val::BStr(b) => SVal::scalar(Val::TStr(b)),
            v => SVal::scalar(Val::from(to_json_string(&v))),
        }
    }
}

impl jaq_std::ValT for SVal {
    fn into_seq<S: FromIterator<Self>>(self) -> Result<S, Self> {
        let SVal { v, d } = self;
        match v {
            Val::Arr(a) => {
                if Rc::strong_count(&a) > 1 {
                    charge(a.len() * ELEM);
                }
                let items = Rc::try_unwrap(a).unwrap_or_else(|a| (*a).clone());
                let d = d.saturating_sub(1);
                Ok(items.into_iter().map(|v| SVal { v, d }).collect())
            }
            v => Err(SVal { v, d }),
        }
    }

    fn is_int(&self) -> bool {
        jaq_std::ValT::is_int(&self.v)
    }

    fn as_isize(&self) -> Option<isize> {
        jaq_std::ValT::as_isize(&self.v)
    }

    fn as_f64(&self) -> Option<f64> {
        jaq_std::ValT::as_f64(&self.v)
    }

    fn is_utf8_str(&self) -> bool {
        jaq_std::ValT::is_utf8_str(&self.v)
    }

    fn as_bytes(&self) -> Option<&[u8]> {
        jaq_std::ValT::as_bytes(&self.v)
    }

    fn as_sub_str(&self, sub: &[u8]) -> Self {
        SVal::scalar(jaq_std::ValT::as_sub_str(&self.v, sub))
    }

    fn from_utf8_bytes(b: impl AsRef<[u8]> + Send + 'static) -> Self {
        charge_string(b.as_ref().len());
        SVal::scalar(<Val as jaq_std::ValT>::from_utf8_bytes(b))
    }
}
