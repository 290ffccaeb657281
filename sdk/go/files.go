package stockade

import (
	"context"
	"io/fs"
	"time"

	"github.com/stockade-dev/stockade/sdk/go/pb"
)

// File operations run inside the sandbox as its user: paths (relative ones from the
// working directory) and symlinks resolve inside the sandbox, never on the host, and
// read-only places stay read-only. A missing path is an error that matches
// fs.ErrNotExist (and ErrNotFound); one that must not exist, fs.ErrExist.

// FileEntry is a directory entry, or what Stat says of a path.
type FileEntry struct {
	Name string
	// Kind is "file", "dir", "symlink" or "other".
	Kind  string
	Size  uint64
	Mode  fs.FileMode
	MTime time.Time
	// LinkTarget is where a symbolic link points: a listed link, or a Stat of a
	// path that is one (whose other fields describe the file it leads to).
	LinkTarget string
	// Xattrs are its extended attributes in the "user." namespace (names in full)
	// whose values are text; set them with SetXattrs.
	Xattrs map[string]string
}

// IsDir reports whether the entry is a directory.
func (e FileEntry) IsDir() bool { return e.Kind == "dir" }

// GrepMatch is one line Grep found.
type GrepMatch struct {
	Path       string
	LineNumber uint64
	Line       string
}

func (s *Sandbox) file(ctx context.Context, req *pb.FileRequest) (*pb.FileReply, error) {
	req.SandboxId = s.id
	r, err := s.c.rpc.File(ctx, req)
	if err != nil {
		return nil, s.c.fail(ctx, err)
	}
	return r, nil
}

// WriteFile writes data to path (parents created), as the sandbox user; a file
// there is replaced.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte) error {
	_, err := s.file(ctx, &pb.FileRequest{Op: &pb.FileRequest_Write{Write: &pb.WriteOp{Path: path, Data: data}}})
	return err
}

// WriteFileMode is WriteFile with the file's permission bits.
func (s *Sandbox) WriteFileMode(ctx context.Context, path string, data []byte, perm fs.FileMode) error {
	mode := uint32(perm.Perm())
	_, err := s.file(ctx, &pb.FileRequest{Op: &pb.FileRequest_Write{Write: &pb.WriteOp{Path: path, Data: data, Mode: &mode}}})
	return err
}

// ReadFile reads the file at path: all of it, up to 32 MiB (a larger file is
// ErrLimit; ReadRange reads it in parts).
func (s *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	data, _, _, err := s.ReadRange(ctx, path, 0, 0)
	return data, err
}

// ReadRange reads up to limit bytes (0: to the end, within 32 MiB) from offset;
// it also returns the file's size and whether the read reached its end.
func (s *Sandbox) ReadRange(ctx context.Context, path string, offset, limit uint64) (data []byte, size uint64, eof bool, err error) {
	if limit == 0 || limit > MaxTransferBytes {
		limit = MaxTransferBytes
	}
	r, err := s.file(ctx, &pb.FileRequest{Op: &pb.FileRequest_Read{Read: &pb.ReadOp{Path: path, Offset: offset, Limit: limit}}})
	if err != nil {
		return nil, 0, false, err
	}
	d := r.GetData()
	if d == nil {
		return nil, 0, false, unexpected("read", r)
	}
	return d.Data, d.Size, d.Eof, nil
}

// Edit replaces old with replacement in the file at path: old must occur exactly
// once unless all. It returns the number of replacements.
func (s *Sandbox) Edit(ctx context.Context, path, old, replacement string, all bool) (int, error) {
	r, err := s.file(ctx, &pb.FileRequest{Op: &pb.FileRequest_Edit{Edit: &pb.EditOp{Path: path, Old: old, New: replacement, ReplaceAll: all}}})
	if err != nil {
		return 0, err
	}
	n, ok := r.Result.(*pb.FileReply_Edited)
	if !ok {
		return 0, unexpected("edit", r)
	}
	return int(n.Edited), nil
}

func entryOf(e *pb.FileEntry) FileEntry {
	kind := map[pb.FileKind]string{pb.FileKind_FILE: "file", pb.FileKind_DIR: "dir", pb.FileKind_SYMLINK: "symlink"}[e.Kind]
	if kind == "" {
		kind = "other"
	}
	return FileEntry{Name: e.Name, Kind: kind, Size: e.Size, Mode: fs.FileMode(e.Mode & 0o7777), MTime: time.Unix(e.Mtime, 0),
		LinkTarget: e.GetLinkTarget(), Xattrs: e.GetXattrs()}
}

// List is the entries of the directory at path.
func (s *Sandbox) List(ctx context.Context, path string) ([]FileEntry, error) {
	r, err := s.file(ctx, &pb.FileRequest{Op: &pb.FileRequest_Ls{Ls: &pb.PathOp{Path: path}}})
	if err != nil {
		return nil, err
	}
	es := r.GetEntries()
	if es == nil {
		return nil, unexpected("list", r)
	}
	out := make([]FileEntry, 0, len(es.Entries))
	for _, e := range es.Entries {
		out = append(out, entryOf(e))
	}
	return out, nil
}

// Stat describes path (a symlink itself, not its target).
func (s *Sandbox) Stat(ctx context.Context, path string) (FileEntry, error) {
	r, err := s.file(ctx, &pb.FileRequest{Op: &pb.FileRequest_Stat{Stat: &pb.PathOp{Path: path}}})
	if err != nil {
		return FileEntry{}, err
	}
	es := r.GetEntries()
	if es == nil || len(es.Entries) != 1 {
		return FileEntry{}, unexpected("stat", r)
	}
	return entryOf(es.Entries[0]), nil
}

// Glob is the paths below root matching pattern (`**` crosses directories), and
// whether the list was cut at the daemon's limit.
func (s *Sandbox) Glob(ctx context.Context, pattern, root string) (paths []string, truncated bool, err error) {
	r, err := s.file(ctx, &pb.FileRequest{Op: &pb.FileRequest_Glob{Glob: &pb.GlobOp{Pattern: pattern, Root: root}}})
	if err != nil {
		return nil, false, err
	}
	p := r.GetPaths()
	if p == nil {
		return nil, false, unexpected("glob", r)
	}
	return p.Paths, p.Truncated, nil
}

// GrepOptions narrow a Grep.
type GrepOptions struct {
	// Include keeps files whose names match this glob (such as "*.py").
	Include string
	// MaxMatches stops after this many (0: the daemon's limit).
	MaxMatches int
}

// Grep is the lines matching the regular expression regex in the files below root,
// and whether the list was cut at its limit.
func (s *Sandbox) Grep(ctx context.Context, regex, root string, opts ...GrepOptions) ([]GrepMatch, bool, error) {
	var o GrepOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	op := &pb.GrepOp{Regex: regex, Root: root, MaxMatches: uint32(max(0, o.MaxMatches))}
	if o.Include != "" {
		op.Include = &o.Include
	}
	r, err := s.file(ctx, &pb.FileRequest{Op: &pb.FileRequest_Grep{Grep: op}})
	if err != nil {
		return nil, false, err
	}
	m := r.GetMatches()
	if m == nil {
		return nil, false, unexpected("grep", r)
	}
	out := make([]GrepMatch, 0, len(m.Matches))
	for _, x := range m.Matches {
		out = append(out, GrepMatch{Path: x.Path, LineNumber: x.LineNumber, Line: x.Line})
	}
	return out, m.Truncated, nil
}

// Mkdir creates the directory path and its parents.
func (s *Sandbox) Mkdir(ctx context.Context, path string) error {
	_, err := s.file(ctx, &pb.FileRequest{Op: &pb.FileRequest_Mkdir{Mkdir: &pb.MkdirOp{Path: path, Parents: true}}})
	return err
}

// SetXattrs sets extended attributes of path, names in the "user." namespace and in
// full ("user.owner"); the others it has are kept.
func (s *Sandbox) SetXattrs(ctx context.Context, path string, xattrs map[string]string) error {
	_, err := s.file(ctx, &pb.FileRequest{Op: &pb.FileRequest_SetXattrs{SetXattrs: &pb.SetXattrsOp{Path: path, Xattrs: xattrs}}})
	return err
}

// Remove removes the file or directory tree at path.
func (s *Sandbox) Remove(ctx context.Context, path string) error {
	_, err := s.file(ctx, &pb.FileRequest{Op: &pb.FileRequest_Rm{Rm: &pb.RmOp{Path: path, Recursive: true}}})
	return err
}

// Upload unpacks a tar (or gzipped tar) archive into the directory dest inside the
// sandbox. The daemon refuses archives with `..` or absolute entries, links out of
// dest, devices, and more than 10,000 entries or 32 MiB. See UploadPath for a host
// file or directory.
func (s *Sandbox) Upload(ctx context.Context, dest string, archive []byte) error {
	_, err := s.file(ctx, &pb.FileRequest{Op: &pb.FileRequest_Upload{Upload: &pb.UploadOp{Dest: dest, Archive: archive}}})
	return err
}

// Download is a tar of path inside the sandbox (a directory: its contents). See
// DownloadTo to unpack it on the host.
func (s *Sandbox) Download(ctx context.Context, path string) ([]byte, error) {
	r, err := s.file(ctx, &pb.FileRequest{Op: &pb.FileRequest_Download{Download: &pb.PathOp{Path: path}}})
	if err != nil {
		return nil, err
	}
	a, ok := r.Result.(*pb.FileReply_Archive)
	if !ok {
		return nil, unexpected("download", r)
	}
	return a.Archive, nil
}

func unexpected(op string, r *pb.FileReply) error {
	return newError(CodeInternal, "the daemon answered a "+op+" with "+describeReply(r)+"; the SDK and daemon disagree on the API (use matching versions)")
}

func describeReply(r *pb.FileReply) string {
	switch r.Result.(type) {
	case nil:
		return "no result"
	case *pb.FileReply_Done:
		return "done"
	case *pb.FileReply_Data:
		return "data"
	case *pb.FileReply_Edited:
		return "an edit count"
	case *pb.FileReply_Entries:
		return "entries"
	case *pb.FileReply_Paths:
		return "paths"
	case *pb.FileReply_Matches:
		return "matches"
	}
	return "an archive"
}
