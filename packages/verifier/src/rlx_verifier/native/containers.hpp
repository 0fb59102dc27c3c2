// The codec of each container, compiled in only when a signature uses it (headers cost time).
// --- vector
template <class T> void put(Out& o, const std::vector<T>& v) { put_all(o, v); }
template <class T> void get(In& i, std::vector<T>& v) { get_seq<std::vector<T>, T>(i, v); }
// --- deque
template <class T> void put(Out& o, const std::deque<T>& v) { put_all(o, v); }
template <class T> void get(In& i, std::deque<T>& v) { get_seq<std::deque<T>, T>(i, v); }
// --- set
template <class T> void put(Out& o, const std::set<T>& v) { put_all(o, v); }
template <class T> void get(In& i, std::set<T>& v) { get_set<std::set<T>, T>(i, v); }
// --- unordered_set
template <class T> void put(Out& o, const std::unordered_set<T>& v) { put_all(o, v); }
template <class T> void get(In& i, std::unordered_set<T>& v) { get_set<std::unordered_set<T>, T>(i, v); }
// --- map
template <class K, class V> void put(Out& o, const std::map<K, V>& v) { put_all(o, v); }
template <class K, class V> void get(In& i, std::map<K, V>& v) { get_set<std::map<K, V>, std::pair<K, V>>(i, v); }
// --- unordered_map
template <class K, class V> void put(Out& o, const std::unordered_map<K, V>& v) { put_all(o, v); }
template <class K, class V> void get(In& i, std::unordered_map<K, V>& v) { get_set<std::unordered_map<K, V>, std::pair<K, V>>(i, v); }
