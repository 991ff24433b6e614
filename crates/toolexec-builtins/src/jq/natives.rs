//! Native jq filters: jaq's generic ones, plus our versions of those that
//! jaq only implements for its own value type (`jaq_json::funs`), and safe
//! replacements for the ones with side effects (`env`, `halt`, logging).

use jaq_core::native::{Filter, Fun, bome, run, unary, v};
use jaq_core::{Error, RunPtr, ValR};
use jaq_json::{Num, Val};

use super::Sandbox;
use super::guard::check;
use super::val::{SVal, charge_string, to_json_string};

/// Natives jaq-std provides that we replace.
const REPLACED: &[&str] = &["env", "halt", "debug_empty", "stderr_empty"];

/// Every native filter available to a query.
pub(crate) fn funs() -> impl Iterator<Item = Fun<Sandbox>> {
    let std = jaq_std::funs::<Sandbox>().filter(|(name, _, _)| !REPLACED.contains(name));
    jaq_core::funs::<Sandbox>()
        .chain(std)
        .chain(own().into_vec().into_iter().map(run::<Sandbox>))
}

fn own() -> Box<[Filter<RunPtr<Sandbox>>]> {
    Box::new([
        ("fromjson", v(0), |cv| match fromjson(&cv.1) {
            Ok(vals) => Box::new(vals.into_iter().map(Ok)),
            Err(e) => bome(Err(e)),
        }),
        ("tojson", v(0), |cv| bome(Ok(tojson(&cv.1)))),
        ("tobytes", v(0), |cv| bome(tobytes(&cv.1))),
        ("length", v(0), |cv| bome(length(&cv.1))),
        ("contains", v(1), |cv| {
            unary(cv, |x, y| Ok(SVal::from(contains(&x.v, &y.v))))
        }),
        ("has", v(1), |cv| unary(cv, |x, k| has(&x, &k))),
        ("indices", v(1), |cv| unary(cv, |x, y| indices(&x, &y))),
        ("bsearch", v(1), |cv| unary(cv, |a, x| bsearch(&a, &x))),
        // No access to the process environment.
        ("env", v(0), |_| {
            bome(jaq_core::ValT::from_map(std::iter::empty::<(SVal, SVal)>()))
        }),
        ("halt", v(1), |_| {
            bome(Err(Error::str("halt is not supported in json:query")))
        }),
        // `debug` and `stderr` pass their input through without logging.
        ("debug_empty", v(0), |_| Box::new(std::iter::empty())),
        ("stderr_empty", v(0), |_| Box::new(std::iter::empty())),
    ])
}

/// Parses a string holding one or more JSON values.
fn fromjson(x: &SVal) -> ValR<Vec<SVal>, SVal> {
    let bytes = match &x.v {
        Val::TStr(b) => b,
        _ => return Err(Error::typ(x.clone(), "string")),
    };
    // serde_json refuses nesting deeper than 128 levels.
    let mut out = Vec::new();
    for value in serde_json::Deserializer::from_slice(bytes).into_iter::<serde_json::Value>() {
        match value {
            Ok(value) => out.push(super::from_json(&value)),
            Err(e) => {
                let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(100)]).into_owned();
                return Err(Error::str(format!("cannot parse {shown:?} as JSON: {e}")));
            }
        }
    }
    Ok(out)
}

fn tojson(x: &SVal) -> SVal {
    check();
    SVal::scalar(Val::from(to_json_string(&x.v)))
}

fn to_bytes(v: &Val, out: &mut Vec<u8>) -> Result<(), Val> {
    match v {
        Val::Num(n) => {
            let byte = n.as_isize().and_then(|i| u8::try_from(i).ok());
            out.push(byte.ok_or_else(|| v.clone())?);
        }
        Val::BStr(b) | Val::TStr(b) => out.extend_from_slice(b),
        Val::Arr(a) => {
            for x in a.iter() {
                to_bytes(x, out)?;
            }
        }
        _ => return Err(v.clone()),
    }
    if out.len() > super::MAX_STRING_BYTES {
        charge_string(out.len());
    }
    Ok(())
}

fn tobytes(x: &SVal) -> ValR<SVal> {
    check();
    let mut out = Vec::new();
    match to_bytes(&x.v, &mut out) {
        Ok(()) => {
            charge_string(out.len());
            Ok(SVal::scalar(Val::byte_str(out)))
        }
        Err(v) => Err(Error::str(format!("cannot convert {v} to bytes"))),
    }
}

fn length(x: &SVal) -> ValR<SVal> {
    Ok(match &x.v {
        Val::Null => SVal::from(0usize),
        Val::Bool(_) => return Err(Error::str(format!("{} has no length", x.v))),
        Val::Num(_) if x.v < Val::from(0isize) => return -x.clone(),
        Val::Num(_) => x.clone(),
        Val::TStr(s) => SVal::from(char_count(s)),
        Val::BStr(b) => SVal::from(b.len()),
        Val::Arr(a) => SVal::from(a.len()),
        Val::Obj(o) => SVal::from(o.len()),
    })
}

/// Characters of (possibly invalid) UTF-8, counting each invalid sequence once.
fn char_count(s: &[u8]) -> usize {
    s.utf8_chunks()
        .map(|c| c.valid().chars().count() + usize::from(!c.invalid().is_empty()))
        .sum()
}

/// Whether `needle` occurs in `hay`, checking for cancellation as it goes.
fn contains_bytes(hay: &[u8], needle: &[u8]) -> bool {
    if needle.is_empty() {
        return true;
    }
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    for (i, _) in hay.iter().enumerate().filter(|(_, b)| **b == first) {
        if i % 4096 == 0 {
            check();
        }
        if hay[i + 1..].starts_with(rest) {
            return true;
        }
    }
    false
}

/// jq's `contains`: substrings, every element of `b` in some element of `a`,
/// and recursively for objects.
fn contains(a: &Val, b: &Val) -> bool {
    check();
    match (a, b) {
        (Val::BStr(l), Val::BStr(r)) | (Val::TStr(l), Val::TStr(r)) => contains_bytes(l, r),
        (Val::Arr(l), Val::Arr(r)) => r.iter().all(|r| l.iter().any(|l| contains(l, r))),
        (Val::Obj(l), Val::Obj(r)) => r
            .iter()
            .all(|(k, r)| l.get(k).is_some_and(|l| contains(l, r))),
        _ => a == b,
    }
}

fn has(x: &SVal, k: &SVal) -> ValR<SVal> {
    match (&x.v, &k.v) {
        (Val::Obj(o), _) => Ok(SVal::from(o.contains_key(&k.v))),
        (Val::Arr(a), Val::Num(n @ (Num::Int(_) | Num::BigInt(_)))) => {
            let i = n.as_isize().and_then(|i| usize::try_from(i).ok());
            Ok(SVal::from(i.is_some_and(|i| i < a.len())))
        }
        (Val::Null, _) => Ok(SVal::from(false)),
        _ => Err(Error::index(x.clone(), k.clone())),
    }
}

/// Start positions of `needle` in `hay` (element-wise), checking for
/// cancellation (this is quadratic in the worst case).
pub(crate) fn array_indices(hay: &[Val], needle: &[Val]) -> Vec<usize> {
    if needle.is_empty() {
        return Vec::new();
    }
    let mut found = Vec::new();
    for (i, w) in hay.windows(needle.len()).enumerate() {
        check();
        if w == needle {
            found.push(i);
        }
    }
    found
}

fn indices(x: &SVal, y: &SVal) -> ValR<SVal> {
    let found: Vec<usize> = match (&x.v, &y.v) {
        (Val::BStr(_), Val::BStr(n)) | (Val::TStr(_), Val::TStr(n)) if n.is_empty() => Vec::new(),
        (Val::TStr(h), Val::TStr(n)) => {
            // Character positions, as in jq.
            let hay = String::from_utf8_lossy(h);
            let needle = String::from_utf8_lossy(n);
            let mut found = Vec::new();
            for (ci, (bi, _)) in hay.char_indices().enumerate() {
                if ci % 4096 == 0 {
                    check();
                }
                if hay[bi..].starts_with(&*needle) {
                    found.push(ci);
                }
            }
            found
        }
        (Val::BStr(h), Val::BStr(n)) => {
            let mut found = Vec::new();
            for (i, w) in h.windows(n.len()).enumerate() {
                if i % 4096 == 0 {
                    check();
                }
                if w == &n[..] {
                    found.push(i);
                }
            }
            found
        }
        (Val::Arr(h), Val::Arr(n)) => array_indices(h, n),
        (Val::Arr(h), y) => {
            let mut found = Vec::new();
            for (i, x) in h.iter().enumerate() {
                if i % 1024 == 0 {
                    check();
                }
                if x == y {
                    found.push(i);
                }
            }
            found
        }
        _ => return Err(Error::index(x.clone(), y.clone())),
    };
    Ok(found.into_iter().map(SVal::from).collect())
}

fn bsearch(a: &SVal, x: &SVal) -> ValR<SVal> {
    check();
    match &a.v {
        Val::Arr(items) => {
            let i = match items.binary_search(&x.v) {
                Ok(i) => isize::try_from(i).unwrap_or(isize::MAX),
                Err(i) => -1 - isize::try_from(i).unwrap_or(isize::MAX - 1),
            };
            Ok(SVal::from(i))
        }
        _ => Err(Error::typ(a.clone(), "array")),
    }
}
