# A directory watcher for Stockade's E2B API (filesystem.WatchDir and the watcher
# API). It runs inside the sandbox as the sandbox user, so the sandbox's own view,
# permissions and limits decide what it sees. Standard library only: inotify through
# ctypes. Arguments: the directory, then "1" to watch its subdirectories too.
#
# stdout: one JSON object per line: {"ready": true} once every watch is in place,
# then {"name": <path relative to the directory>, "type": "EVENT_TYPE_..."} per event
# (fsnotify's mapping, as E2B's envd: create and moved-to are CREATE, modify WRITE,
# delete REMOVE, moved-from RENAME, attrib CHMOD). A failure before ready is one
# stderr line "\x1e<connect code>\x1e <message>" and exit status 2.
#
# stdin, when it is a pipe: a line "sync N" is answered, once every event already
# queued (a write that returned before the line was sent has queued its events) is
# printed, by {"synced": N}.
import ctypes
import json
import os
import select
import stat
import struct
import sys

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000
IN_CLOEXEC = 0o2000000
MASK = (IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
        | IN_DELETE_SELF | IN_MOVE_SELF)
KINDS = ((IN_CREATE, "CREATE"), (IN_MOVED_TO, "CREATE"), (IN_MODIFY, "WRITE"),
         (IN_DELETE, "REMOVE"), (IN_MOVED_FROM, "RENAME"), (IN_ATTRIB, "CHMOD"))


def fail(code, message):
    sys.stderr.write("\x1e%s\x1e %s\n" % (code, message))
    sys.stderr.flush()
    sys.exit(2)


def emit(objs):
    if objs:
        sys.stdout.write("".join(json.dumps(o) + "\n" for o in objs))
        sys.stdout.flush()


root, recursive = sys.argv[1], sys.argv[2] == "1"
try:
    st = os.stat(root)
except FileNotFoundError:
    fail("not_found", "path %s does not exist" % root)
except PermissionError:
    fail("permission_denied", "path %s cannot be read by the sandbox user" % root)
if not stat.S_ISDIR(st.st_mode):
    fail("invalid_argument", "path %s is not a directory" % root)

libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(IN_CLOEXEC)
if fd < 0:
    fail("resource_exhausted", "inotify_init1: " + os.strerror(ctypes.get_errno()))
watches = {}


def add(path):
    wd = libc.inotify_add_watch(fd, os.fsencode(path), MASK | IN_ONLYDIR | IN_DONT_FOLLOW)
    if wd < 0:
        err = ctypes.get_errno()
        if path == root:
            fail("resource_exhausted", "inotify_add_watch %s: %s" % (path, os.strerror(err)))
        return
    watches[wd] = path


def add_tree(top, found=None):
    """Watches top (and, recursive, the directories below it). With `found`, a
    directory that just appeared: what is already in it was created before its
    watch existed, so each entry is appended to `found` as a CREATE."""
    add(top)
    if recursive:
        # Symlinks are listed among the directories but never followed.
        for d, subdirs, files in os.walk(top):
            for s in subdirs:
                p = os.path.join(d, s)
                if not os.path.islink(p):
                    add(p)
            if found is not None:
                for n in subdirs + files:
                    rel = os.path.relpath(os.path.join(d, n), root)
                    found.append({"name": rel, "type": "EVENT_TYPE_CREATE"})


def take(data):
    out = []
    off = 0
    while off + 16 <= len(data):
        wd, mask, _cookie, ln = struct.unpack_from("iIII", data, off)
        raw = data[off + 16:off + 16 + ln].rstrip(b"\0")
        off += 16 + ln
        if mask & IN_IGNORED:
            watches.pop(wd, None)
            if not watches:
                sys.exit(0)
            continue
        base = watches.get(wd)
        if base is None or not raw:
            # Events on the watched directory itself (deleted, moved) say nothing
            # about an entry; IN_IGNORED follows and ends its watch.
            continue
        full = os.path.join(base, raw.decode("utf-8", "replace"))
        name = os.path.relpath(full, root)
        for bit, kind in KINDS:
            if mask & bit:
                out.append({"name": name, "type": "EVENT_TYPE_" + kind})
        if recursive and mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
            add_tree(full, out)
    return out


def queued():
    """The events already queued, without waiting for more."""
    out = []
    while select.select([fd], [], [], 0)[0]:
        out.extend(take(os.read(fd, 65536)))
    return out


add_tree(root)
emit([{"ready": True}])
inputs = [fd, 0]
pending = b""
while True:
    ready = select.select(inputs, [], [])[0]
    if fd in ready:
        emit(take(os.read(fd, 65536)))
    if 0 in ready:
        got = os.read(0, 4096)
        if not got:
            inputs = [fd]
        pending += got
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            parts = line.split()
            if len(parts) == 2 and parts[0] == b"sync" and parts[1].isdigit():
                emit(queued() + [{"synced": int(parts[1])}])
