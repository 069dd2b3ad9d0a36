/*
 * The pod sandbox's pause process for the test node, built here with gcc -static
 * because no registry can deliver registry.k8s.io/pause.  Like upstream's pause.c:
 * sleep in pause(), reap re-parented children, exit 0 on SIGTERM or SIGINT.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int signum) {
    (void)signum;
    _exit(0);
}

static void on_child(int signum) {
    (void)signum;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction stop = {.sa_handler = on_stop};
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
    if (getpid() != 1) {
        /* Not an error: upstream only warns, so a pause run by hand still works. */
        (void)write(2, "pause: warning: not PID 1\n", 26);
    }
    if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
        sigaction(SIGCHLD, &child, NULL) < 0) {
        return 1;
    }
    for (;;) {
        pause();
    }
}
