// daemon_join.h: the environment-only join. The request and its answer are the daemon's `join`
// protocol (orion_daemon/protocol.py): one JSON object per line on the daemon's Unix socket, the
// asking process's pid taken from the socket (SO_PEERCRED), so the slot is claimed by this very
// process. Everything here runs once, inside the first driver call, before the driver is used.
#include "daemon_join.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "client_runtime.h"
#include "runtime_support.h"

#define ORION_EXPORT extern "C" __attribute__((visibility("default")))

namespace orion {
namespace {

constexpr std::size_t kMaxReplyBytes = 1 << 20;
constexpr int kReplyTimeoutS = 30;  // the daemon loads a profile before it answers

// ---- a small JSON reader: enough for the daemon's answer and its record ---------------------
struct Json {
    enum class Type { kNull, kBool, kNumber, kString, kArray, kObject } type = Type::kNull;
    bool boolean = false;
    double number = 0;
    std::string text;
    std::vector<Json> items;
    std::vector<std::pair<std::string, Json>> members;

    const Json* get(const char* key) const {
        if (type != Type::kObject) return nullptr;
        for (const auto& [name, value] : members) {
            if (name == key) return &value;
        }
        return nullptr;
    }
    const std::string* string_at(const char* key) const {
        const Json* value = get(key);
        return value != nullptr && value->type == Type::kString ? &value->text : nullptr;
    }
};

class JsonParser {
public:
    explicit JsonParser(const std::string& text) : text_(text) {}

    bool parse(Json* out) {
        if (!value(out, 0)) return false;
        skip_space();
        return at_ == text_.size();
    }

private:
    static constexpr int kMaxDepth = 32;

    void skip_space() {
        while (at_ < text_.size() && std::strchr(" \t\r\n", text_[at_]) != nullptr) ++at_;
    }
    bool literal(const char* word) {
        const std::size_t length = std::strlen(word);
        if (text_.compare(at_, length, word) != 0) return false;
        at_ += length;
        return true;
    }
    bool value(Json* out, int depth) {
        if (depth > kMaxDepth) return false;
        skip_space();
        if (at_ >= text_.size()) return false;
        const char c = text_[at_];
        if (c == '{') return object(out, depth);
        if (c == '[') return array(out, depth);
        if (c == '"') {
            out->type = Json::Type::kString;
            return string(&out->text);
        }
        if (literal("true")) {
            out->type = Json::Type::kBool;
            out->boolean = true;
            return true;
        }
        if (literal("false")) {
            out->type = Json::Type::kBool;
            return true;
        }
        if (literal("null")) return true;
        const char* begin = text_.c_str() + at_;
        char* end = nullptr;
        out->number = std::strtod(begin, &end);
        if (end == begin) return false;
        out->type = Json::Type::kNumber;
        at_ += static_cast<std::size_t>(end - begin);
        return true;
    }
    // The comma-separated entries after an opening bracket, up to `close`, each read by
    // `entry`: the one loop of objects and arrays, so both treat commas and spaces alike.
    template <typename Entry>
    bool entries(char close, Entry entry) {
        ++at_;
        skip_space();
        if (at_ < text_.size() && text_[at_] == close) return ++at_, true;
        while (true) {
            if (!entry()) return false;
            skip_space();
            if (at_ < text_.size() && text_[at_] == ',') {
                ++at_;
                continue;
            }
            return at_ < text_.size() && text_[at_++] == close;
        }
    }
    bool object(Json* out, int depth) {
        out->type = Json::Type::kObject;
        return entries('}', [&] {
            skip_space();
            std::string key;
            if (at_ >= text_.size() || text_[at_] != '"' || !string(&key)) return false;
            skip_space();
            if (at_ >= text_.size() || text_[at_] != ':') return false;
            ++at_;
            Json member;
            if (!value(&member, depth + 1)) return false;
            out->members.emplace_back(std::move(key), std::move(member));
            return true;
        });
    }
    bool array(Json* out, int depth) {
        out->type = Json::Type::kArray;
        return entries(']', [&] {
            Json item;
            if (!value(&item, depth + 1)) return false;
            out->items.push_back(std::move(item));
            return true;
        });
    }
    static void append_utf8(std::string* out, unsigned code) {
        if (code < 0x80) {
            out->push_back(static_cast<char>(code));
        } else if (code < 0x800) {
            out->push_back(static_cast<char>(0xC0 | (code >> 6)));
            out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
        } else {
            out->push_back(static_cast<char>(0xE0 | (code >> 12)));
            out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
        }
    }
    bool string(std::string* out) {
        ++at_;  // the opening quote
        while (at_ < text_.size()) {
            const char c = text_[at_++];
            if (c == '"') return true;
            if (c != '\\') {
                out->push_back(c);
                continue;
            }
            if (at_ >= text_.size()) return false;
            const char escaped = text_[at_++];
            switch (escaped) {
                case 'n': out->push_back('\n'); break;
                case 't': out->push_back('\t'); break;
                case 'r': out->push_back('\r'); break;
                case 'b': out->push_back('\b'); break;
                case 'f': out->push_back('\f'); break;
                case 'u': {
                    if (at_ + 4 > text_.size()) return false;
                    // Surrogate pairs come out as two replacement-free 3-byte sequences: the
                    // texts read here (errors, paths, names) are ASCII in practice.
                    append_utf8(out, static_cast<unsigned>(
                                         std::strtoul(text_.substr(at_, 4).c_str(), nullptr, 16)));
                    at_ += 4;
                    break;
                }
                default: out->push_back(escaped);  // \" \\ \/
            }
        }
        return false;
    }

    const std::string& text_;
    std::size_t at_ = 0;
};

std::string json_quote(const std::string& text) {
    std::string out = "\"";
    for (const unsigned char c : text) {
        if (c == '"' || c == '\\') {
            out.push_back('\\');
            out.push_back(static_cast<char>(c));
        } else if (c < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
            out += escaped;
        } else {
            out.push_back(static_cast<char>(c));
        }
    }
    return out + "\"";
}

// ---- what the environment asks for ------------------------------------------------------------
struct JoinFailure {
    std::string message;
};

std::string environment(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr ? value : "";
}

std::string trimmed(const std::string& text) {
    const auto begin = text.find_first_not_of(" \t");
    if (begin == std::string::npos) return "";
    return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

// `"key":<number>,` for a variable holding a finite number; nothing when it is unset.
std::string number_field(const char* variable, const char* key) {
    const std::string text = trimmed(environment(variable));
    if (text.empty()) return "";
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !std::isfinite(value)) {
        throw JoinFailure{std::string(variable) + " is not a number: '" + text + "'"};
    }
    char formatted[64];
    std::snprintf(formatted, sizeof formatted, "%.17g", value);
    return json_quote(key) + ":" + formatted + ",";
}

std::string read_file(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    std::ostringstream text;
    text << file.rdbuf();
    return text.str();
}

std::vector<std::string> command_line() {
    std::vector<std::string> arguments;
    const std::string raw = read_file("/proc/self/cmdline");
    std::size_t start = 0;
    while (start < raw.size()) {
        const std::size_t end = raw.find('\0', start);
        arguments.push_back(raw.substr(start, end == std::string::npos ? end : end - start));
        if (end == std::string::npos) break;
        start = end + 1;
    }
    // A process that retitles itself (Ray's workers: setproctitle) pads its arguments with NULs.
    while (!arguments.empty() && arguments.back().empty()) arguments.pop_back();
    return arguments;
}

std::string default_name() {
    std::string program = trimmed(read_file("/proc/self/comm"));
    while (!program.empty() && program.back() == '\n') program.pop_back();
    if (program.empty()) program = "program";
    const std::string pid = "-" + std::to_string(getpid());
    constexpr std::size_t kMaxName = 31;  // the shared state's client name field
    if (program.size() + pid.size() > kMaxName) program.resize(kMaxName - pid.size());
    return program + pid;
}

std::string join_request() {
    const std::string role = trimmed(environment("ORION_ROLE"));
    std::string name = trimmed(environment("ORION_NAME"));
    if (name.empty()) name = default_name();
    std::string message = "{\"op\":\"join\",\"role\":" + json_quote(role) +
                          ",\"name\":" + json_quote(name) + ",\"command\":[";
    const std::vector<std::string> arguments = command_line();
    for (std::size_t i = 0; i < arguments.size(); ++i) {
        message += (i ? "," : "") + json_quote(arguments[i]);
    }
    message += "],";
    const std::string profile = trimmed(environment("ORION_PROFILE"));
    if (!profile.empty()) message += "\"profile\":" + json_quote(profile) + ",";
    // Set by the library of a BE client's child (client_runtime.cpp, rejoin_as_child).
    const std::string parent = trimmed(environment("ORION_PARENT"));
    if (!parent.empty()) message += "\"parent\":" + json_quote(parent) + ",";
    // A size is passed on as text: the daemon reads sizes (8GiB) the one way orion reads them.
    const std::string limit = trimmed(environment("ORION_MEMORY_LIMIT"));
    if (!limit.empty()) message += "\"memory_limit\":" + json_quote(limit) + ",";
    message += number_field("ORION_MEMORY_FRACTION", "memory_fraction");
    message += number_field("ORION_MIN_UTIL", "min_util");
    message += number_field("ORION_MAX_UTIL", "max_util");
    message += number_field("ORION_LATENCY_TARGET_MS", "latency_target_ms");
    // A word the daemon checks against its choices (HP_CONTEXT in scheduler_core/settings.py).
    const std::string hp_context = trimmed(environment("ORION_HP_CONTEXT"));
    if (!hp_context.empty()) message += "\"hp_context\":" + json_quote(hp_context) + ",";
    message.back() = '}';
    return message + "\n";
}

// ---- which daemon -----------------------------------------------------------------------------
std::string state_base() {
    std::string base = environment("ORION_STATE_DIR");
    if (!base.empty()) return base;
    base = environment("XDG_RUNTIME_DIR");
    if (!base.empty()) return base + "/orion";
    return "/tmp/orion-" + std::to_string(getuid());
}

bool all_digits(const std::string& text) {
    return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

// The state folders of the daemons whose GPU has this UUID (or UUID prefix, as CUDA accepts).
std::vector<std::string> folders_with_uuid(const std::string& base, const std::string& uuid) {
    std::vector<std::string> found;
    std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(base.c_str()), closedir);
    if (!dir) return found;
    while (const dirent* entry = readdir(dir.get())) {
        const std::string name = entry->d_name;
        if (name.rfind("gpu", 0) != 0 || !all_digits(name.substr(3))) continue;
        const std::string folder = base + "/" + name;
        Json record;
        if (!JsonParser(read_file(folder + "/daemon.json")).parse(&record)) continue;
        const Json* gpu = record.get("gpu");
        const std::string* recorded = gpu != nullptr ? gpu->string_at("uuid") : nullptr;
        if (recorded != nullptr && recorded->rfind(uuid, 0) == 0) found.push_back(folder);
    }
    return found;
}

// The state folder of the daemon of the one GPU CUDA_VISIBLE_DEVICES names.
std::string daemon_folder(const std::string& device) {
    const std::string base = state_base();
    if (all_digits(device)) return base + "/gpu" + std::to_string(std::stoul(device));
    if (device.rfind("GPU-", 0) != 0) {
        throw JoinFailure{"CUDA_VISIBLE_DEVICES names '" + device +
                          "', neither a GPU index nor a GPU UUID (orion shares whole GPUs, not "
                          "MIG instances)"};
    }
    const std::vector<std::string> folders = folders_with_uuid(base, device);
    if (folders.empty()) {
        throw JoinFailure{"no orion daemon runs for GPU " + device + " (no record under " + base +
                          ")"};
    }
    if (folders.size() > 1) {
        throw JoinFailure{"GPU " + device + " matches the records of " +
                          std::to_string(folders.size()) + " daemons under " + base};
    }
    return folders.front();
}

// ---- whom to trust (docs/architecture.md, "Trust model"; orion_daemon/ownership.py) ------------
// A state folder, and the folder of state folders above it, must be this user's own and writable
// by no one else: whoever can write there can put a socket of their own where we look.
void check_folder(const std::string& path) {
    struct stat info {};
    if (lstat(path.c_str(), &info) != 0) return;  // missing: connecting says there is no daemon
    char described[512];
    std::snprintf(described, sizeof described, "%s (owner uid %u, mode %04o)", path.c_str(),
                  static_cast<unsigned>(info.st_uid), static_cast<unsigned>(info.st_mode & 07777));
    const std::string refusing = std::string("refusing the state folder ") + described + ": ";
    if (S_ISLNK(info.st_mode)) throw JoinFailure{refusing + "it is a symlink"};
    if (!S_ISDIR(info.st_mode)) throw JoinFailure{refusing + "it is not a folder"};
    if (info.st_uid != getuid()) {
        throw JoinFailure{refusing + "it belongs to another user (this is uid " +
                          std::to_string(getuid()) + ")"};
    }
    if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        throw JoinFailure{refusing + "others may write to it (it must be 0700)"};
    }
}

std::string parent_of(const std::string& path) {
    const std::size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

// The daemon is whoever listens on the socket, as the kernel says: it must run as this user.
void check_daemon_peer(int fd, const std::string& path) {
    ucred peer{};
    socklen_t size = sizeof peer;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
        throw JoinFailure{"cannot tell who runs the daemon at " + path + ": " +
                          std::strerror(errno)};
    }
    if (peer.uid != getuid()) {
        throw JoinFailure{"refusing the orion daemon at " + path + ": it runs as uid " +
                          std::to_string(peer.uid) + ", not as this user (uid " +
                          std::to_string(getuid()) + ")"};
    }
}

// The only variables a daemon's answer may set (orion_daemon/ownership.py, ANSWER_VARIABLES);
// ORION_PRELOAD, which daemons of earlier versions sent, is ignored: the library is loaded.
bool daemon_may_set(const std::string& name) {
    static const char* const kAllowed[] = {"ORION_RUN", "ORION_CLIENT", "ORION_STRICT",
                                           "ORION_BE_WHEN_DAEMON_GONE",
                                           "ORION_DAEMON_GONE_HOLD_S",
                                           "CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY",
                                           "CUDA_MPS_LOG_DIRECTORY", "CUDA_MPS_CLIENT_PRIORITY",
                                           "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"};
    for (const char* allowed : kAllowed) {
        if (name == allowed) return true;
    }
    return false;
}

// ---- the conversation -------------------------------------------------------------------------
// A descriptor received with an answer, closed unless taken.
class ReceivedFd {
public:
    ReceivedFd() = default;
    ReceivedFd(const ReceivedFd&) = delete;
    ReceivedFd& operator=(const ReceivedFd&) = delete;
    ~ReceivedFd() { reset(-1); }
    void reset(int fd) {
        if (fd_ >= 0) close(fd_);
        fd_ = fd;
    }
    int get() const { return fd_; }
    int take() { return std::exchange(fd_, -1); }

private:
    int fd_ = -1;
};

// Reads what the peer sent into `buffer`, keeping a descriptor passed with it (SCM_RIGHTS, the
// run's decisions) in `passed`; any other descriptor is closed at once.
ssize_t receive(int fd, char* buffer, std::size_t size, ReceivedFd* passed) {
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    iovec vector{buffer, size};
    msghdr message{};
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(fd, &message, MSG_CMSG_CLOEXEC);
    if (n < 0) return n;
    for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
         header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
            int received = -1;
            std::memcpy(&received, CMSG_DATA(header) + i * sizeof(int), sizeof received);
            if (passed->get() < 0) {
                passed->reset(received);
            } else {
                close(received);
            }
        }
    }
    return n;
}

std::string ask_daemon(const std::string& folder, const std::string& device,
                       const std::string& request, ReceivedFd* passed) {
    check_folder(parent_of(folder));
    check_folder(folder);
    const std::string path = folder + "/daemon.sock";
    struct Closer {
        int fd;
        ~Closer() {
            if (fd >= 0) close(fd);
        }
    };
    // A socket's address holds 107 bytes of path; a deeper state folder is reached through a
    // descriptor of it (/proc/self/fd/N/daemon.sock names the same file), as the daemon binds it
    // (orion_common/unix_sockets.py).
    Closer folder_fd{-1};
    std::string address_path = path;
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.size() >= sizeof address.sun_path) {
        folder_fd.fd = open(folder.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (folder_fd.fd < 0) {
            throw JoinFailure{"no orion daemon runs for GPU " + device + " (state folder " +
                              folder + ": " + std::strerror(errno) + "); start one with `orion up`"};
        }
        address_path = "/proc/self/fd/" + std::to_string(folder_fd.fd) + "/daemon.sock";
    }
    std::memcpy(address.sun_path, address_path.c_str(), address_path.size() + 1);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw JoinFailure{std::string("cannot open a socket: ") + std::strerror(errno)};
    Closer closer{fd};
    timeval timeout{kReplyTimeoutS, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
        throw JoinFailure{"no orion daemon runs for GPU " + device + " (state folder " + folder +
                          ": " + std::strerror(errno) + "); start one with `orion up`"};
    }
    check_daemon_peer(fd, path);
    std::size_t sent = 0;
    while (sent < request.size()) {
        const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw JoinFailure{std::string("the daemon did not take the request: ") +
                                      std::strerror(errno)};
        sent += static_cast<std::size_t>(n);
    }
    std::string reply;
    char buffer[4096];
    while (reply.find('\n') == std::string::npos && reply.size() < kMaxReplyBytes) {
        const ssize_t n = receive(fd, buffer, sizeof buffer, passed);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw JoinFailure{std::string("the daemon did not answer: ") +
                                     std::strerror(errno)};
        if (n == 0) break;
        reply.append(buffer, static_cast<std::size_t>(n));
    }
    return reply.substr(0, reply.find('\n'));
}

using Answer = std::vector<std::pair<std::string, std::string>>;

// The variables of the daemon's answer to `join`, once every one is a variable it may set, and
// ORION_DECISIONS: where this process holds the run's decisions the daemon passed with its answer
// (`decisions`, taken; /proc/<pid>/fd/<n>, which this process's children can open too).
Answer parse_answer(const std::string& line, ReceivedFd* decisions) {
    Json answer;
    if (!JsonParser(line).parse(&answer) || answer.type != Json::Type::kObject) {
        throw JoinFailure{"the daemon's answer is not a JSON object"};
    }
    const Json* ok = answer.get("ok");
    if (ok == nullptr || ok->type != Json::Type::kBool || !ok->boolean) {
        const std::string* error = answer.string_at("error");
        const std::string* hint = answer.string_at("hint");
        throw JoinFailure{(error != nullptr ? *error : std::string("the daemon refused")) +
                          (hint != nullptr ? " (hint: " + *hint + ")" : "")};
    }
    const Json* variables = answer.get("environment");
    if (variables == nullptr || variables->type != Json::Type::kObject) {
        throw JoinFailure{"the daemon's answer to join has no environment"};
    }
    // All or nothing: an answer that tries to set anything else is not orion's to follow.
    std::vector<std::pair<std::string, std::string>> accepted;
    for (const auto& [name, value] : variables->members) {
        if (name == "ORION_PRELOAD") continue;  // the library is loaded already
        if (!daemon_may_set(name)) {
            throw JoinFailure{"refusing the daemon's answer: it sets '" + name.substr(0, 64) +
                              "', which is not one of the variables a daemon may set"};
        }
        if (value.type != Json::Type::kString || value.text.find('\0') != std::string::npos) {
            throw JoinFailure{"refusing the daemon's answer: " + name + " is not text"};
        }
        accepted.emplace_back(name, value.text);
    }
    if (decisions->get() < 0) {
        throw JoinFailure{"the daemon's answer to join came without the run's decisions (a "
                          "daemon of an older orion? restart it with this one)"};
    }
    // Kept open for the life of the process: the mapping needs it only once, but a child's
    // library finds its parent's run through it (client_runtime.cpp, rejoin_as_child).
    accepted.emplace_back("ORION_DECISIONS", "/proc/" + std::to_string(getpid()) + "/fd/" +
                                                 std::to_string(decisions->take()));
    return accepted;
}

void apply_answer(const std::string& line, ReceivedFd* decisions) {
    for (const auto& [name, value] : parse_answer(line, decisions)) {
        setenv(name.c_str(), value.c_str(), 1);
    }
}

}  // namespace

bool daemon_join_requested() {
    const char* run = std::getenv("ORION_RUN");
    const char* role = std::getenv("ORION_ROLE");
    return (run == nullptr || run[0] == '\0') && role != nullptr && role[0] != '\0';
}

void join_daemon_from_environment() {
    if (!daemon_join_requested()) return;
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    const std::string devices = visible != nullptr ? trimmed(visible) : "0";
    if (devices.empty() || devices == "-1") {
        // No GPU visible to this process: it has nothing to share, and nothing to join.
        if (env_flag("ORION_DEBUG")) log_message("no GPU visible (CUDA_VISIBLE_DEVICES); not joining");
        return;
    }
    try {
        if (devices.find(',') != std::string::npos) {
            throw JoinFailure{"CUDA_VISIBLE_DEVICES lists several GPUs (" + devices +
                              "); a client joins the daemon of one GPU"};
        }
        const std::string request = join_request();
        ReceivedFd decisions;
        const std::string answer = ask_daemon(daemon_folder(devices), devices, request, &decisions);
        apply_answer(answer, &decisions);
    } catch (const JoinFailure& failure) {
        log_message(("cannot join the orion daemon: " + failure.message + "; exiting with status " +
                     std::to_string(kJoinRefusedExit))
                        .c_str());
        _exit(kJoinRefusedExit);
    } catch (const std::exception& error) {  // std::stoul on an absurd index, bad_alloc
        log_message((std::string("cannot join the orion daemon: ") + error.what() +
                     "; exiting with status " + std::to_string(kJoinRefusedExit))
                        .c_str());
        _exit(kJoinRefusedExit);
    }
    if (env_flag("ORION_DEBUG")) log_message("joined the daemon from the environment");
}

bool joined_from_environment() {
    const char* role = std::getenv("ORION_ROLE");
    return role != nullptr && role[0] != '\0';
}

bool rejoin_daemon(std::vector<std::pair<std::string, std::string>>* answer, std::string* why) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    const std::string devices = visible != nullptr ? trimmed(visible) : "0";
    try {
        ReceivedFd decisions;
        const std::string line =
            ask_daemon(daemon_folder(devices), devices, join_request(), &decisions);
        *answer = parse_answer(line, &decisions);
        return true;
    } catch (const JoinFailure& failure) {
        *why = failure.message;
    } catch (const std::exception& error) {
        *why = error.what();
    }
    return false;
}

}  // namespace orion

// Joins now (when the environment asks for it) instead of at the first driver call; 1 when this
// process is an attached client afterwards. For programs that want a refused join to end them
// before they build anything, e.g. a Ray actor (orion.ray): found with dlsym, so a program
// without the library in LD_PRELOAD simply does not find it.
ORION_EXPORT int orion_join_now() { return orion::ClientRuntime::instance().active() ? 1 : 0; }
