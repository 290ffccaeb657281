package stockade

import (
	"fmt"

	"github.com/stockade-dev/stockade/sdk/go/pb"
)

// TerminalSize is a terminal's size in character cells, each 1 to 65535.
type TerminalSize struct {
	Rows, Cols int
}

func (t TerminalSize) wire() (*pb.TtySize, error) {
	if t.Rows < 1 || t.Cols < 1 || t.Rows > 65535 || t.Cols > 65535 {
		return nil, invalid(fmt.Sprintf("a terminal of %d rows and %d columns: give each as 1 to 65535", t.Rows, t.Cols))
	}
	return &pb.TtySize{Rows: uint32(t.Rows), Cols: uint32(t.Cols)}, nil
}

// Resize sets the size of the command's terminal (ExecOptions.Terminal); the command
// gets SIGWINCH. A command without a terminal ignores it.
func (p *Process) Resize(rows, cols int) error {
	size, err := TerminalSize{Rows: rows, Cols: cols}.wire()
	if err != nil {
		return err
	}
	id, err := p.waitStarted()
	if err != nil {
		return err
	}
	_, err = p.sb.c.rpc.ExecInput(p.ctx, &pb.ExecInputRequest{ExecId: id, Resize: size})
	return p.sb.c.fail(p.ctx, err)
}
