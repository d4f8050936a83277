package streamconsumer_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// receiveBuffers returns the receive buffer size of each TCP socket of this process connected to
// port on the peer, by the socket's name in /proc (socket:[inode]).
func receiveBuffers(t *testing.T, port int) map[string]int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int{}
	for _, e := range fds {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		name, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(name, "socket:[") {
			continue
		}
		peer, err := syscall.Getpeername(fd)
		if err != nil {
			continue
		}
		p4, ok4 := peer.(*syscall.SockaddrInet4)
		p6, ok6 := peer.(*syscall.SockaddrInet6)
		if !(ok4 && p4.Port == port) && !(ok6 && p6.Port == port) {
			continue
		}
		size, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		// The descriptor may have been closed and reused meanwhile: it must still name the socket.
		if again, _ := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || again != name {
			continue
		}
		sizes[name] = size
	}
	return sizes
}

// kernelReceiveBuffer returns the receive buffer the kernel gives a new TCP socket. Autotuning
// only grows it on a connection whose size no one set.
func kernelReceiveBuffer(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	size, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF)
	if err != nil {
		t.Fatal(err)
	}
	return size
}
