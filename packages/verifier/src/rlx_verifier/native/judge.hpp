// The judge's side of assert-style C++: start the candidate process, call it, fail.
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <stdexcept>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
namespace rlx {
static int to_candidate = -1, from_candidate = -1;
static pid_t candidate = -1;
[[noreturn]] static void fail(const char* why) {
    std::fprintf(stderr, "rlx: %s\n", why);
    std::fflush(stderr);
    if (candidate > 0) ::kill(candidate, SIGKILL);
    ::_exit(3);
}
static void start() {
    char self[4096];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 32);
    if (n <= 0) fail("cannot find the judge's own path");
    self[n] = 0;
    char* slash = std::strrchr(self, '/');
    if (slash == nullptr) fail("cannot find the judge's own path");
    std::strcpy(slash + 1, "candidate");
    if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) fail("prctl(PR_SET_DUMPABLE) failed");
    std::signal(SIGPIPE, SIG_IGN);
    int req[2], rep[2];
    if (::pipe2(req, O_CLOEXEC) != 0 || ::pipe2(rep, O_CLOEXEC) != 0) fail("pipe2 failed");
    int fds[4];
    for (int k = 0; k < 4; k++) {
        int fd = k < 2 ? req[k] : rep[k - 2];
        fds[k] = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
        ::close(fd);
        if (fds[k] < 0) fail("fcntl failed");
    }
    std::fflush(nullptr);
    pid_t parent = ::getpid();
    candidate = ::fork();
    if (candidate < 0) fail("fork failed");
    if (candidate == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        std::signal(SIGPIPE, SIG_DFL);  // the judge ignores it; the candidate gets the default
        if (::getppid() != parent) ::_exit(1);
        if (::dup2(fds[0], 3) != 3 || ::dup2(fds[3], 4) != 4) ::_exit(1);
        char* argv[] = {self, nullptr};
        ::execv(self, argv);
        ::_exit(1);
    }
    ::close(fds[0]);
    ::close(fds[3]);
    to_candidate = fds[1];
    from_candidate = fds[2];
}
static std::string reply;
static In call(std::uint32_t index, const Out& args, const char* name) {
    Out m;
    raw(m, &index, 4);
    m.b += args.b;
    if (!send_message(to_candidate, m.b)) fail("the candidate process ended before a call");
    if (!read_message(from_candidate, reply, 256u << 20)) {
        std::fprintf(stderr, "rlx: no reply from the candidate to a call of %s\n", name);
        fail("the candidate did not answer");
    }
    // the first byte: 0 a result follows, 1 the call threw (its what() follows)
    In in{(const unsigned char*)reply.data() + 1, reply.size() - 1, !reply.empty()};
    if (in.ok && reply[0] == 1) {
        std::string what;
        get(in, what);
        if (!in.ok || in.n != 0) fail("the candidate's exception could not be decoded");
        throw std::runtime_error("rlx: the candidate threw: " + what);
    }
    if (!in.ok || reply[0] != 0) fail("bad reply");
    return in;
}
static void done(const In& in, const char* name) {
    if (!in.ok || in.n != 0) {
        std::fprintf(stderr, "rlx: the candidate's reply to %s could not be decoded\n", name);
        fail("bad reply");
    }
}
}  // namespace rlx
