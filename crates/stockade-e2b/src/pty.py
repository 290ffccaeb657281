# A pseudo-terminal for Stockade's E2B API (process.Start with "pty"). It runs
# inside the sandbox as the sandbox user: it opens a pty pair on the sandbox's own
# devpts, starts the command as the leader of a new session with the pty as its
# controlling terminal, and relays. Standard library only.
#
# Arguments: COLS ROWS CMD [ARGS...]. stderr first carries the command's pid as
# "\x1epid N\x1e\n" (as the other commands' prologue). stdout is the terminal's
# output, raw. stdin is framed, so keystrokes and resizes share it: a kind byte, a
# big-endian u32 length, the payload; kind "d" is input for the terminal, "r" a
# resize (big-endian u16 cols, u16 rows). The exit status is the command's (128 +
# the signal when a signal ended it).
import errno
import fcntl
import os
import select
import struct
import sys
import termios


def winsize(fd, cols, rows):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


cols, rows, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
master, slave = os.openpty()
winsize(slave, cols, rows)
pid = os.fork()
if pid == 0:
    try:
        os.close(master)
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        for fd in (0, 1, 2):
            os.dup2(slave, fd)
        if slave > 2:
            os.close(slave)
        os.execvp(argv[0], argv)
    except OSError as e:
        os.write(2, ("%s: %s\r\n" % (argv[0], e.strerror)).encode())
    os._exit(127)
os.close(slave)
os.write(2, b"\x1epid %d\x1e\n" % pid)

pending = b""
stdin_open = True
while True:
    fds = [master] + ([0] if stdin_open else [])
    readable, _, _ = select.select(fds, [], [])
    if master in readable:
        try:
            data = os.read(master, 65536)
        except OSError as e:
            if e.errno != errno.EIO:
                raise
            data = b""
        if not data:
            break  # the terminal's last holder closed it
        os.write(1, data)
    if 0 in readable:
        chunk = os.read(0, 65536)
        if not chunk:
            stdin_open = False
            continue
        pending += chunk
        while len(pending) >= 5:
            kind, n = pending[:1], struct.unpack(">I", pending[1:5])[0]
            if len(pending) < 5 + n:
                break
            payload, pending = pending[5:5 + n], pending[5 + n:]
            if kind == b"d":
                view = memoryview(payload)
                while view:
                    view = view[os.write(master, view):]
            elif kind == b"r" and n == 4:
                c, r = struct.unpack(">HH", payload)
                winsize(master, c, r)
_, status = os.waitpid(pid, 0)
if os.WIFSIGNALED(status):
    sys.exit(128 + os.WTERMSIG(status))
sys.exit(os.WEXITSTATUS(status))
