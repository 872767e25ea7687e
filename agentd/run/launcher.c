/* The sandbox's launcher, in C: agentd/run/rlimits.py's contract without a Python interpreter's start
 * (13 ms and more of every run's start, against about 1 ms here). agentd/run/launcher.py builds it.
 *
 *   launcher [--as N --cpu N --fsize N --nproc N --uid N --gid N --chdir DIR --ready-fd FD
 *             --env-fd FD --cgroup-fds FD,FD] -- COMMAND [ARG...]
 *
 * In this order, as rlimits.py: read the command's environment from the sealed env file (never
 * argv), join the run's cgroups while still uid 0, set the limits (soft = hard), drop to uid/gid with
 * no supplementary groups, change directory, report the PID namespace (its name and a descriptor)
 * on the ready socket, and exec the command with exactly that environment. Exit 126 when it cannot
 * prepare the command, 127 when it cannot start it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

extern char **environ;

static void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("launcher: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

static long long number(const char *name, const char *text) {
    char *end;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (!*text || *end || errno)
        die(1, "--%s takes a number, not '%s'", name, text);
    return value;
}

static char **read_env(int fd) {
    size_t size = 0, cap = 1 << 16;
    char *buf = malloc(cap + 1);
    for (ssize_t got;;) {
        if (!buf)
            die(126, "cannot prepare the command: out of memory");
        got = read(fd, buf + size, cap - size);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            die(126, "cannot prepare the command: reading the environment: %s", strerror(errno));
        if (got == 0)
            break;
        size += (size_t)got;
        if (size == cap)
            buf = realloc(buf, (cap *= 2) + 1);
    }
    close(fd);
    buf[size] = '\0';
    size_t count = 0;
    for (size_t i = 0; i < size; i++)
        count += buf[i] == '\0';
    char **env = calloc(count + 2, sizeof(char *));
    if (!env)
        die(126, "cannot prepare the command: out of memory");
    size_t n = 0;
    for (char *entry = buf; entry < buf + size; entry += strlen(entry) + 1) {
        char *eq = strchr(entry, '=');
        if (eq && eq != entry) /* NAME=VALUE with a name: what rlimits.py keeps */
            env[n++] = entry;
    }
    return env;
}

static void join_cgroups(char *fds) {
    for (char *item = strtok(fds, ","); item; item = strtok(NULL, ",")) {
        int fd = (int)number("cgroup-fds", item);
        ssize_t wrote = write(fd, "0", 1);
        int err = errno;
        close(fd);
        if (wrote != 1)
            die(126, "cannot prepare the command: joining a cgroup: %s", strerror(err));
    }
}

static void set_limit(int which, long long value) {
    struct rlimit limit;
    if (getrlimit(which, &limit) != 0)
        die(126, "cannot prepare the command: getrlimit: %s", strerror(errno));
    rlim_t wanted = (rlim_t)value;
    if (limit.rlim_max != RLIM_INFINITY && wanted > limit.rlim_max)
        wanted = limit.rlim_max; /* raising a hard limit needs a privilege the caller may not have */
    limit.rlim_cur = limit.rlim_max = wanted;
    if (setrlimit(which, &limit) != 0)
        die(126, "cannot prepare the command: setrlimit: %s", strerror(errno));
}

static void become(uid_t uid, gid_t gid) {
    if (getuid() == uid && geteuid() == uid && getgid() == gid && getegid() == gid)
        return;
    if (setgroups(1, &gid) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
        die(126, "cannot prepare the command: becoming %u:%u: %s", uid, gid, strerror(errno));
}

static void report_ready(int fd) {
    char name[64] = "unknown";
    ssize_t len = readlink("/proc/self/ns/pid", name, sizeof name - 2);
    int pinned = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
    if (len <= 0 || pinned < 0) {
        strcpy(name, "unknown");
        len = 7;
        if (pinned >= 0)
            close(pinned);
        pinned = -1;
    }
    name[len++] = '\n';
    struct iovec iov = {.iov_base = name, .iov_len = (size_t)len};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (pinned >= 0) {
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof control.buf;
        struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cmsg), &pinned, sizeof(int));
    }
    ssize_t sent;
    while ((sent = sendmsg(fd, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    int err = errno;
    close(fd); /* the command cannot use the channel */
    if (pinned >= 0)
        close(pinned);
    if (sent < 0)
        die(126, "cannot prepare the command: reporting the sandbox: %s", strerror(err));
}

/* execvpe with PATH from the command's own environment (glibc's looks at the launcher's). */
static void exec_command(char **argv, char **env) {
    if (strchr(argv[0], '/')) {
        execve(argv[0], argv, env);
        die(127, "cannot start %s: %s", argv[0], strerror(errno));
    }
    const char *path = "/bin:/usr/bin"; /* os.defpath */
    for (char **e = env; *e; e++)
        if (strncmp(*e, "PATH=", 5) == 0)
            path = *e + 5;
    int first = 0;
    size_t length = strlen(argv[0]);
    for (const char *dir = path;; dir++) {
        const char *end = strchrnul(dir, ':');
        size_t dirlen = end == dir ? 1 : (size_t)(end - dir);
        char *full = malloc(dirlen + length + 2);
        if (!full)
            die(127, "cannot start %s: out of memory", argv[0]);
        memcpy(full, end == dir ? "." : dir, dirlen);
        full[dirlen] = '/';
        memcpy(full + dirlen + 1, argv[0], length + 1);
        execve(full, argv, env);
        if (!first && errno != ENOENT && errno != ENOTDIR)
            first = errno;
        free(full);
        if (!*end)
            break;
        dir = end;
    }
    die(127, "cannot start %s: %s", argv[0], strerror(first ? first : ENOENT));
}

static const char *const LIMITS[] = {"as", "cpu", "fsize", "nproc"};
static const int RESOURCES[] = {RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NPROC};

int main(int argc, char **argv) {
    const char *limit[4] = {0}, *uid = NULL, *gid = NULL, *chdir_to = NULL, *ready = NULL, *envfd = NULL;
    char *cgroups = NULL;
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i += 2) {
        const char *name = strncmp(argv[i], "--", 2) == 0 ? argv[i] + 2 : "";
        if (i + 1 >= argc || strcmp(argv[i + 1], "--") == 0)
            die(1, "%s needs a value", argv[i]);
        const char *value = argv[i + 1];
        int known = 0;
        for (int k = 0; k < 4; k++)
            if (strcmp(name, LIMITS[k]) == 0)
                limit[k] = value, known = 1;
        if (strcmp(name, "uid") == 0) uid = value, known = 1;
        if (strcmp(name, "gid") == 0) gid = value, known = 1;
        if (strcmp(name, "chdir") == 0) chdir_to = value, known = 1;
        if (strcmp(name, "ready-fd") == 0) ready = value, known = 1;
        if (strcmp(name, "env-fd") == 0) envfd = value, known = 1;
        if (strcmp(name, "cgroup-fds") == 0) cgroups = argv[i + 1], known = 1;
        if (!known)
            die(1, "unknown option '%s'", argv[i]);
        if (strcmp(name, "chdir") != 0 && strcmp(name, "cgroup-fds") != 0)
            number(name, value);
    }
    if (i >= argc)
        die(1, "usage: launcher [--as N --cpu N --fsize N --nproc N --uid N --gid N --chdir DIR"
               " --ready-fd FD --env-fd FD --cgroup-fds FD,FD] -- COMMAND [ARG...]");
    if (i + 1 >= argc)
        die(1, "no command");
    char **env = envfd ? read_env((int)number("env-fd", envfd)) : environ;
    if (cgroups && *cgroups)
        join_cgroups(cgroups);
    for (int k = 0; k < 4; k++)
        if (limit[k])
            set_limit(RESOURCES[k], number(LIMITS[k], limit[k]));
    if (uid)
        become((uid_t)number("uid", uid), (gid_t)number("gid", gid ? gid : uid));
    if (chdir_to && *chdir_to && chdir(chdir_to) != 0)
        die(126, "cannot prepare the command: %s: %s", chdir_to, strerror(errno));
    if (ready)
        report_ready((int)number("ready-fd", ready));
    exec_command(argv + i + 1, env);
    return 127;
}
