// The wire codec of assert-style Rust (see rlx_verifier/assert_native.py), in both programs.
#[allow(dead_code)]
pub mod rlx_wire {
    use ::std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
    use ::std::hash::Hash;
    pub struct Rd<'a> { pub b: &'a [u8] }
    impl<'a> Rd<'a> {
        pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
            if self.b.len() < n { return None; }
            let (a, rest) = self.b.split_at(n);
            self.b = rest;
            Some(a)
        }
        pub fn count(&mut self) -> Option<usize> {
            let n = u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize;
            if n > self.b.len() { None } else { Some(n) }
        }
    }
    pub trait Put { fn put(&self, w: &mut Vec<u8>); }
    pub trait Get: Sized { fn get(r: &mut Rd) -> Option<Self>; }
    pub fn count(w: &mut Vec<u8>, n: usize) { w.extend_from_slice(&(n as u32).to_le_bytes()); }
    macro_rules! signed { ($($t:ty),*) => { $(
        impl Put for $t { fn put(&self, w: &mut Vec<u8>) { w.extend_from_slice(&(*self as i64).to_le_bytes()); } }
        impl Get for $t { fn get(r: &mut Rd) -> Option<Self> {
            <$t>::try_from(i64::from_le_bytes(r.take(8)?.try_into().ok()?)).ok() } }
    )* } }
    macro_rules! unsigned { ($($t:ty),*) => { $(
        impl Put for $t { fn put(&self, w: &mut Vec<u8>) { w.extend_from_slice(&(*self as u64).to_le_bytes()); } }
        impl Get for $t { fn get(r: &mut Rd) -> Option<Self> {
            <$t>::try_from(u64::from_le_bytes(r.take(8)?.try_into().ok()?)).ok() } }
    )* } }
    signed!(i8, i16, i32, i64, isize);
    unsigned!(u8, u16, u32, u64, usize);
    impl Put for f32 { fn put(&self, w: &mut Vec<u8>) { w.extend_from_slice(&self.to_bits().to_le_bytes()); } }
    impl Get for f32 { fn get(r: &mut Rd) -> Option<Self> { Some(f32::from_bits(u32::from_le_bytes(r.take(4)?.try_into().ok()?))) } }
    impl Put for f64 { fn put(&self, w: &mut Vec<u8>) { w.extend_from_slice(&self.to_bits().to_le_bytes()); } }
    impl Get for f64 { fn get(r: &mut Rd) -> Option<Self> { Some(f64::from_bits(u64::from_le_bytes(r.take(8)?.try_into().ok()?))) } }
    impl Put for bool { fn put(&self, w: &mut Vec<u8>) { w.push(*self as u8); } }
    impl Get for bool { fn get(r: &mut Rd) -> Option<Self> { match r.take(1)?[0] { 0 => Some(false), 1 => Some(true), _ => None } } }
    impl Put for char { fn put(&self, w: &mut Vec<u8>) { w.extend_from_slice(&(*self as u32).to_le_bytes()); } }
    impl Get for char { fn get(r: &mut Rd) -> Option<Self> { char::from_u32(u32::from_le_bytes(r.take(4)?.try_into().ok()?)) } }
    impl Put for str { fn put(&self, w: &mut Vec<u8>) { count(w, self.len()); w.extend_from_slice(self.as_bytes()); } }
    impl Put for String { fn put(&self, w: &mut Vec<u8>) { self.as_str().put(w) } }
    impl Get for String { fn get(r: &mut Rd) -> Option<Self> { let n = r.count()?; String::from_utf8(r.take(n)?.to_vec()).ok() } }
    impl Get for &'static str { fn get(r: &mut Rd) -> Option<Self> { Some(Box::leak(String::get(r)?.into_boxed_str())) } }
    impl<T: Put + ?Sized> Put for &T { fn put(&self, w: &mut Vec<u8>) { (**self).put(w) } }
    impl<T: Put + ?Sized> Put for &mut T { fn put(&self, w: &mut Vec<u8>) { (**self).put(w) } }
    impl<T: Put> Put for [T] { fn put(&self, w: &mut Vec<u8>) { count(w, self.len()); for x in self { x.put(w) } } }
    impl<T: Put> Put for Vec<T> { fn put(&self, w: &mut Vec<u8>) { self.as_slice().put(w) } }
    impl<T: Put> Put for VecDeque<T> { fn put(&self, w: &mut Vec<u8>) { count(w, self.len()); for x in self { x.put(w) } } }
    impl<T: Put> Put for HashSet<T> { fn put(&self, w: &mut Vec<u8>) { count(w, self.len()); for x in self { x.put(w) } } }
    impl<T: Put> Put for BTreeSet<T> { fn put(&self, w: &mut Vec<u8>) { count(w, self.len()); for x in self { x.put(w) } } }
    impl<K: Put, V: Put> Put for HashMap<K, V> { fn put(&self, w: &mut Vec<u8>) { count(w, self.len()); for (k, v) in self { k.put(w); v.put(w) } } }
    impl<K: Put, V: Put> Put for BTreeMap<K, V> { fn put(&self, w: &mut Vec<u8>) { count(w, self.len()); for (k, v) in self { k.put(w); v.put(w) } } }
    impl<T: Put> Put for Option<T> { fn put(&self, w: &mut Vec<u8>) { match self { None => w.push(0), Some(x) => { w.push(1); x.put(w) } } } }
    impl<T: Get> Get for Option<T> { fn get(r: &mut Rd) -> Option<Self> { match r.take(1)?[0] { 0 => Some(None), 1 => Some(Some(T::get(r)?)), _ => None } } }
    fn items<T: Get>(r: &mut Rd) -> Option<Vec<T>> {
        let n = r.count()?;
        let mut v = Vec::new();
        for _ in 0..n { v.push(T::get(r)?); }
        Some(v)
    }
    impl<T: Get> Get for Vec<T> { fn get(r: &mut Rd) -> Option<Self> { items(r) } }
    impl<T: Get> Get for VecDeque<T> { fn get(r: &mut Rd) -> Option<Self> { Some(items(r)?.into()) } }
    impl<T: Get + Eq + Hash> Get for HashSet<T> { fn get(r: &mut Rd) -> Option<Self> { Some(items(r)?.into_iter().collect()) } }
    impl<T: Get + Ord> Get for BTreeSet<T> { fn get(r: &mut Rd) -> Option<Self> { Some(items(r)?.into_iter().collect()) } }
    impl<K: Get + Eq + Hash, V: Get> Get for HashMap<K, V> { fn get(r: &mut Rd) -> Option<Self> { Some(items::<(K, V)>(r)?.into_iter().collect()) } }
    impl<K: Get + Ord, V: Get> Get for BTreeMap<K, V> { fn get(r: &mut Rd) -> Option<Self> { Some(items::<(K, V)>(r)?.into_iter().collect()) } }
    macro_rules! tuple { ($($n:ident),*) => {
        impl<$($n: Put),*> Put for ($($n,)*) {
            #[allow(non_snake_case, unused_variables)]
            fn put(&self, w: &mut Vec<u8>) { let ($($n,)*) = self; $($n.put(w);)* }
        }
        impl<$($n: Get),*> Get for ($($n,)*) {
            #[allow(unused_variables)]
            fn get(r: &mut Rd) -> Option<Self> { Some(($($n::get(r)?,)*)) }
        }
    } }
    tuple!();
    tuple!(A);
    tuple!(A, B);
    tuple!(A, B, C);
    tuple!(A, B, C, D);
    tuple!(A, B, C, D, E);
    tuple!(A, B, C, D, E, F);
    pub fn read_message(f: &mut impl ::std::io::Read, cap: usize) -> Option<Vec<u8>> {
        let mut h = [0u8; 4];
        f.read_exact(&mut h).ok()?;
        let n = u32::from_le_bytes(h) as usize;
        if n > cap { return None; }
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 65536];
        while buf.len() < n {
            let want = (n - buf.len()).min(chunk.len());
            let got = f.read(&mut chunk[..want]).ok()?;
            if got == 0 { return None; }
            buf.extend_from_slice(&chunk[..got]);
        }
        Some(buf)
    }
    pub fn send_message(f: &mut impl ::std::io::Write, b: &[u8]) -> bool {
        f.write_all(&(b.len() as u32).to_le_bytes()).is_ok() && f.write_all(b).is_ok() && f.flush().is_ok()
    }
}
