package handoff

import (
	"net"
	"os"
)

// NotifySystemd sends state (e.g. "READY=1\nMAINPID=123") to systemd's
// notify socket when the process runs under a Type=notify unit; elsewhere
// it does nothing. A new process after an upgrade sends its own MAINPID so
// systemd follows it (the unit needs NotifyAccess=all).
func NotifySystemd(state string) error {
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" {
		return nil
	}
	if sock[0] == '@' {
		sock = "\x00" + sock[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}
