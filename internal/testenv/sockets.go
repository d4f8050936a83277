package testenv

import (
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// ReceiveBuffers returns the receive buffer size of each TCP socket of this process connected to
// the port of uri. The key is the socket's name in /proc (socket:[inode]).
func ReceiveBuffers(t testing.TB, uri string) map[string]int {
	t.Helper()
	return receiveBuffers(t, uriPort(t, uri))
}

// receiveBuffers is ReceiveBuffers of the sockets connected to port.
func receiveBuffers(t testing.TB, port int) map[string]int {
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

// CheckNewReceiveBuffers fails t for each socket to the port of uri, not in before, whose receive
// buffer is below the kernel's default. It fails t too when there is no such socket. A buffer a
// client set stays small: autotuning grows only one no one set.
func CheckNewReceiveBuffers(t testing.TB, uri string, before map[string]int) {
	t.Helper()
	kernel, port := kernelReceiveBuffer(t), uriPort(t, uri)
	checked := 0
	for sock, size := range receiveBuffers(t, port) {
		if _, ok := before[sock]; ok {
			continue
		}
		checked++
		if size < kernel {
			t.Errorf("a connection to port %d has a receive buffer of %d bytes, below the kernel's default of %d", port, size, kernel)
		}
	}
	if checked == 0 {
		t.Errorf("found no new connection to port %d: the check proved nothing", port)
	}
}

// kernelReceiveBuffer returns the receive buffer the kernel gives a new TCP socket.
func kernelReceiveBuffer(t testing.TB) int {
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

// uriPort returns the port of uri.
func uriPort(t testing.TB, uri string) int {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("port of %q: %v", u.Host, err)
	}
	return p
}
