package stockade

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Limits of one transfer (as the daemon's).
const (
	MaxTransferBytes = 32 << 20
	MaxEntries       = 10_000
	// maxLinkHops is the most symlinks followed while checking one target (as Linux's 40).
	maxLinkHops = 40
)

// UploadPath copies the host file or directory src into the directory dest inside
// the sandbox, as dest/<base name of src>. Files, directories and symlinks are sent;
// the daemon refuses symlinks that leave dest.
func (s *Sandbox) UploadPath(ctx context.Context, src, dest string) error {
	archive, err := tarOf(src)
	if err != nil {
		return err
	}
	return s.Upload(ctx, dest, archive)
}

func tarOf(src string) ([]byte, error) {
	src = filepath.Clean(src)
	if _, err := os.Lstat(src); err != nil {
		return nil, invalid(fmt.Sprintf("upload source %s: %v", src, err))
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	base := filepath.Dir(src)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return fmt.Errorf("%s is not a file, directory or symlink", p)
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(base, p)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(tw, f); err != nil {
				return err
			}
		}
		if buf.Len() > MaxTransferBytes {
			return newError(CodeLimitExceeded, fmt.Sprintf("upload of %s is larger than the %d MiB a transfer may move (fix: upload it in parts)", src, MaxTransferBytes>>20))
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		var se *Error
		if errors.As(err, &se) {
			return nil, se
		}
		return nil, invalid(fmt.Sprintf("cannot pack %s for upload: %v", src, err))
	}
	return buf.Bytes(), nil
}

// DownloadTo downloads path from the sandbox and unpacks it into the host directory
// dest (created if missing) by the rule `stockade cp` applies, the archive being
// hostile: it is refused whole (ErrDenied, ErrLimit) unless every entry is a file,
// directory or symlink with a relative path without `..`, named once, not below a
// symlink of the archive, and every symlink's target is relative and stays inside
// dest; nothing is written through a symlink leaving dest (also one already there);
// ownership is not restored, and modes lose setuid, setgid, sticky and group/other
// write.
func (s *Sandbox) DownloadTo(ctx context.Context, path, dest string) error {
	archive, err := s.Download(ctx, path)
	if err != nil {
		return err
	}
	return UnpackOnHost(archive, dest)
}

type tarEntry struct {
	hdr  *tar.Header
	name string
	data []byte
}

// UnpackOnHost unpacks a tar that came out of a sandbox into dest by the rule of
// DownloadTo.
func UnpackOnHost(archive []byte, dest string) error {
	entries, err := checkArchive(archive)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return newError(CodeInternal, fmt.Sprintf("cannot create %s: %v", dest, err))
	}
	// Every write goes through root, which refuses any path that leaves dest through
	// a symlink, one already there included.
	root, err := os.OpenRoot(dest)
	if err != nil {
		return newError(CodeInternal, fmt.Sprintf("cannot open %s: %v", dest, err))
	}
	defer root.Close()
	for _, e := range entries {
		if err := writeEntry(root, e); err != nil {
			if strings.Contains(err.Error(), "path escapes") {
				return denied(fmt.Sprintf("archive entry %s would be written through a symlink leaving %s", e.name, dest))
			}
			return newError(CodeInternal, fmt.Sprintf("cannot unpack %s into %s: %v", e.name, dest, err))
		}
	}
	return nil
}

func writeEntry(root *os.Root, e tarEntry) error {
	mode := fs.FileMode(e.hdr.Mode) & 0o777 &^ 0o022
	if dir := path.Dir(e.name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	switch e.hdr.Typeflag {
	case tar.TypeDir:
		if err := root.MkdirAll(e.name, 0o755); err != nil {
			return err
		}
		return root.Chmod(e.name, mode|0o700)
	case tar.TypeSymlink:
		_ = root.Remove(e.name)
		return root.Symlink(e.hdr.Linkname, e.name)
	}
	// O_NOFOLLOW-like: a symlink already at the name is replaced, never followed.
	if st, err := root.Lstat(e.name); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		if err := root.Remove(e.name); err != nil {
			return err
		}
	}
	f, err := root.OpenFile(e.name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(e.data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func denied(msg string) *Error { return newError(CodePolicyDenied, msg) }

// checkArchive is the first pass: every entry against the rule, nothing written.
func checkArchive(archive []byte) ([]tarEntry, error) {
	tr := tar.NewReader(bytes.NewReader(archive))
	var entries []tarEntry
	seen := map[string]bool{}
	links := map[string]string{}
	var total int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, invalid(fmt.Sprintf("the archive from the sandbox is not a valid tar archive: %v", err))
		}
		total += max(0, h.Size)
		if len(entries)+1 > MaxEntries || total > MaxTransferBytes {
			return nil, newError(CodeLimitExceeded, fmt.Sprintf("the archive from the sandbox exceeds %d entries and %d bytes of contents", MaxEntries, MaxTransferBytes))
		}
		name, err := entryName(h.Name)
		if err != nil {
			return nil, err
		}
		if name == "" {
			if h.Typeflag == tar.TypeDir {
				continue // "./": the destination itself
			}
			return nil, denied(fmt.Sprintf("archive entry %q names the target directory itself", h.Name))
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
		default:
			return nil, denied(fmt.Sprintf("archive entry %s is a %s; only files, directories and symlinks are unpacked", name, typeName(h.Typeflag)))
		}
		if seen[name] {
			return nil, denied(fmt.Sprintf("archive entry %s appears twice", name))
		}
		seen[name] = true
		e := tarEntry{hdr: h, name: name}
		if h.Typeflag == tar.TypeSymlink {
			if h.Linkname == "" {
				return nil, denied(fmt.Sprintf("symlink %s has no target", name))
			}
			links[name] = h.Linkname
		}
		if h.Typeflag == tar.TypeReg {
			if e.data, err = io.ReadAll(tr); err != nil {
				return nil, invalid(fmt.Sprintf("the archive from the sandbox is not a valid tar archive: %v", err))
			}
		}
		entries = append(entries, e)
	}
	for _, e := range entries {
		for dir := path.Dir(e.name); dir != "."; dir = path.Dir(dir) {
			if _, ok := links[dir]; ok {
				return nil, denied(fmt.Sprintf("archive entry %s is below the symlink %s of the same archive", e.name, dir))
			}
		}
	}
	for link, target := range links {
		if err := linkStaysInside(links, link, target); err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// entryName is an entry's path without "." components ("" for the destination
// itself), refused when empty, absolute or with "..".
func entryName(raw string) (string, error) {
	if raw == "" {
		return "", denied("archive entry with an empty path")
	}
	if strings.HasPrefix(raw, "/") {
		return "", denied(fmt.Sprintf("archive entry %s leaves the target directory", raw))
	}
	var parts []string
	for _, c := range strings.Split(raw, "/") {
		switch c {
		case "", ".":
		case "..":
			return "", denied(fmt.Sprintf("archive entry %s leaves the target directory", raw))
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/"), nil
}

// linkStaysInside resolves target from link's directory, following the archive's
// links, and refuses it when it is absolute or climbs above the destination.
func linkStaysInside(links map[string]string, link, target string) error {
	refuse := func(why string) error { return denied(fmt.Sprintf("symlink %s -> %s %s", link, target, why)) }
	var at []string
	if d := path.Dir(link); d != "." {
		at = strings.Split(d, "/")
	}
	if strings.HasPrefix(target, "/") {
		return refuse("is absolute; links must stay inside the destination")
	}
	todo := strings.Split(target, "/")
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
		case "..":
			if len(at) == 0 {
				return refuse("leaves the destination")
			}
			at = at[:len(at)-1]
		default:
			at = append(at, c)
			if next, ok := links[strings.Join(at, "/")]; ok {
				if hops++; hops > maxLinkHops {
					return refuse("goes through too many links (a loop?)")
				}
				at = at[:len(at)-1]
				if strings.HasPrefix(next, "/") {
					return refuse("is absolute; links must stay inside the destination")
				}
				todo = append(strings.Split(next, "/"), todo...)
			}
		}
	}
	return nil
}

func typeName(t byte) string {
	switch t {
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "fifo"
	}
	return fmt.Sprintf("entry of type %q", t)
}
