/*
 * LD_PRELOAD shim for tests/test_runner_entrypoint.py: sends the calling process SIGTERM in the
 * instant its waitpid() reaps a child that exited with SIGNAL_AT_REAP_STATUS, so the signal
 * arrives while the caller is still inside waitpid. That is the timing in which a runner
 * exits just as its pod is deleted (the operator deregisters an idle runner and deletes its
 * pod together), too narrow to hit by sending the signal from outside.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t (*real_waitpid)(pid_t, int *, int);

/* Resolved at load, not on the first call: that may come from bash's SIGCHLD handler. */
__attribute__((constructor)) static void find_waitpid(void) {
    real_waitpid = (pid_t (*)(pid_t, int *, int))dlsym(RTLD_NEXT, "waitpid");
}

pid_t waitpid(pid_t pid, int *status, int options) {
    pid_t reaped = real_waitpid(pid, status, options);
    const char *wanted = getenv("SIGNAL_AT_REAP_STATUS");
    if (reaped > 0 && status != NULL && wanted != NULL && WIFEXITED(*status) &&
        WEXITSTATUS(*status) == atoi(wanted)) {
        kill(getpid(), SIGTERM);
    }
    return reaped;
}
