// One descriptor passed over a Unix socket with one byte beside it (SCM_RIGHTS): how the
// user namespace holder hands its namespace to the server (user.h). (The sandbox's
// control protocol passes several with its messages: protocol.h.)
#pragma once

namespace sandboxd::runtime {

// Sends `byte` with `fd`. Returns 0, or -errno.
int send_byte_with_fd(int sock, char byte, int fd);

// Receives one byte and the descriptor sent with it (close-on-exec; -1 when none came).
// Returns 1 with a byte, 0 at end of stream, or -errno. EINTR is retried.
int receive_byte_with_fd(int sock, char& byte, int& fd);

}  // namespace sandboxd::runtime
