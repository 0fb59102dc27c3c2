// The candidate's main in assert-style C++: decode a call, make it, encode the result.
int main() {
    std::string msg;
    for (;;) {
        if (!rlx::read_message(3, msg, 1u << 30)) ::_exit(0);
        std::uint32_t index = 0;
        if (msg.size() < 4) ::_exit(1);
        std::memcpy(&index, msg.data(), 4);
        rlx::In in{(const unsigned char*)msg.data() + 4, msg.size() - 4, true};
        rlx::Out out;
        switch (index) {
/*{cases}*/
            default: ::_exit(1);
        }
        if (!rlx::send_message(4, out.b)) ::_exit(1);
    }
}
