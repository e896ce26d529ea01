/*
 * Child processes for tests that need a live pid (a ring's owner): one
 * that sleeps until ended, and dies with the test even when an assertion
 * ends it before end_child (it would hold the test's output open). Include
 * after sp_test.h.
 */
#ifndef SP_TEST_CHILD_H
#define SP_TEST_CHILD_H

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t
spawn_sleeper(void)
{
    pid_t parent = getpid(), pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* the parent went before the line above took effect */
        if (getppid() != parent) {
            _exit(0);
        }
        for (;;) {
            pause();
        }
    }
    return pid;
}

static void
end_child(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

#endif
