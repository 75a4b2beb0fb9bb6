// The scripted upstream model as a program, for clients in other processes (the node
// SDK tests, the benchmark): prints "listening on PORT", then serves until killed.
// Scripts are set through its control endpoints (see scripted_upstream.h).
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "scripted_upstream.h"

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  sandboxd::testing::ScriptedUpstream upstream(argc > 1 ? static_cast<uint16_t>(std::atoi(argv[1])) : 0);
  std::printf("listening on %u\n", upstream.port());
  std::fflush(stdout);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  int signo = 0;
  sigwait(&set, &signo);
  return 0;
}
