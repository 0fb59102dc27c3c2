// The wire codec of assert-style C++ (see rlx_verifier/assert_native.py), in both programs.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <type_traits>
#include <unistd.h>
namespace rlx {
struct Out { std::string b; };
struct In { const unsigned char* p; std::size_t n; bool ok; };
inline void raw(Out& o, const void* p, std::size_t n) { o.b.append((const char*)p, n); }
inline bool take(In& i, void* p, std::size_t n) {
    if (!i.ok || i.n < n) { i.ok = false; return false; }
    std::memcpy(p, i.p, n); i.p += n; i.n -= n; return true;
}
inline bool count(In& i, std::uint32_t& n) { return take(i, &n, 4) && (n <= i.n || (i.ok = false)); }
inline void count(Out& o, std::size_t n) { std::uint32_t c = (std::uint32_t)n; raw(o, &c, 4); }
template <class T> void put(Out& o, const T& v) {
    static_assert(std::is_arithmetic<T>::value, "rlx: no encoding for this type");
    if constexpr (sizeof(T) == 1) { unsigned char c = (unsigned char)v; raw(o, &c, 1); }
    else if constexpr (std::is_floating_point<T>::value) raw(o, &v, sizeof v);
    else if constexpr (std::is_signed<T>::value) { std::int64_t x = v; raw(o, &x, 8); }
    else { std::uint64_t x = v; raw(o, &x, 8); }
}
template <class T> void get(In& i, T& v) {
    static_assert(std::is_arithmetic<T>::value, "rlx: no encoding for this type");
    if constexpr (std::is_same<T, bool>::value) {
        unsigned char c = 0; if (take(i, &c, 1)) { if (c > 1) i.ok = false; v = c; }
    } else if constexpr (sizeof(T) == 1) {
        unsigned char c = 0; if (take(i, &c, 1)) v = (T)c;
    } else if constexpr (std::is_floating_point<T>::value) take(i, &v, sizeof v);
    else if constexpr (std::is_signed<T>::value) {
        std::int64_t x = 0;
        if (take(i, &x, 8)) { v = (T)x; if ((std::int64_t)v != x) i.ok = false; }
    } else {
        std::uint64_t x = 0;
        if (take(i, &x, 8)) { v = (T)x; if ((std::uint64_t)v != x) i.ok = false; }
    }
}
inline void put(Out& o, const std::string& s) { count(o, s.size()); raw(o, s.data(), s.size()); }
inline void get(In& i, std::string& s) {
    std::uint32_t n; if (!count(i, n)) return;
    s.assign((const char*)i.p, n); i.p += n; i.n -= n;
}
template <class A, class B> void put(Out& o, const std::pair<A, B>& v) { put(o, v.first); put(o, v.second); }
template <class A, class B> void get(In& i, std::pair<A, B>& v) { get(i, v.first); get(i, v.second); }
template <class C> void put_all(Out& o, const C& c) { count(o, c.size()); for (const auto& x : c) put(o, x); }
template <class C, class T> void get_seq(In& i, C& v) {
    std::uint32_t n; if (!count(i, n)) return;
    v.clear();
    for (std::uint32_t k = 0; k < n && i.ok; k++) { T x{}; get(i, x); v.push_back(std::move(x)); }
}
template <class C, class T> void get_set(In& i, C& v) {
    std::uint32_t n; if (!count(i, n)) return;
    v.clear();
    for (std::uint32_t k = 0; k < n && i.ok; k++) { T x{}; get(i, x); v.insert(std::move(x)); }
}
}  // namespace rlx
namespace rlx {
inline bool write_all(int fd, const void* p, std::size_t n) {
    const char* c = (const char*)p;
    while (n) { ssize_t w = ::write(fd, c, n); if (w <= 0) return false; c += w; n -= (std::size_t)w; }
    return true;
}
// A message: u32 length, then the bytes; over `cap` or cut short is false.
inline bool read_message(int fd, std::string& buf, std::uint32_t cap) {
    std::uint32_t n = 0;
    char* h = (char*)&n;
    for (std::size_t got = 0; got < 4;) {
        ssize_t r = ::read(fd, h + got, 4 - got); if (r <= 0) return false; got += (std::size_t)r;
    }
    if (n > cap) return false;
    buf.clear();
    char chunk[65536];
    while (buf.size() < n) {
        std::size_t want = n - buf.size(); if (want > sizeof chunk) want = sizeof chunk;
        ssize_t r = ::read(fd, chunk, want); if (r <= 0) return false;
        buf.append(chunk, (std::size_t)r);
    }
    return true;
}
inline bool send_message(int fd, const std::string& b) {
    std::uint32_t n = (std::uint32_t)b.size();
    return write_all(fd, &n, 4) && write_all(fd, b.data(), b.size());
}
}  // namespace rlx
