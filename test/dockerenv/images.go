package dockerenv

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

//go:embed images
var imageFiles embed.FS

// The base image's source: Debian trixie's minimal variant (PostgreSQL 17, RabbitMQ 4.0), from the
// Debian mirror of the machine's apt sources (testenv.DebianMirror).
const suite = "trixie"

// EnvCache overrides the cache directory (default: walbox-compose under the user's cache).
const EnvCache = "WALBOX_TEST_DOCKER_CACHE"

// Images names the images a compose run substitutes for the public ones.
type Images struct {
	Postgres string // for postgres:17
	RabbitMQ string // for rabbitmq:4.0-management
	Go       string // for golang:1.26-bookworm (a Go toolchain on the same Debian base)
	Runtime  string // for gcr.io/distroless/static-debian12:nonroot
	Walbox   string // the project's Dockerfile, built on Go and Runtime
}

// Builder builds the images on an engine. Base and service images are cached as files under
// Cache, each named by a hash of everything it is made from; the walbox image is built afresh
// from the project's Dockerfile.
type Builder struct {
	Engine *Engine
	Repo   string // the module's root
	Cache  string
	Logf   func(format string, args ...any)
}

// DefaultCache returns the cache directory for base and service images.
func DefaultCache() (string, error) {
	if dir := os.Getenv(EnvCache); dir != "" {
		return dir, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "walbox-compose"), nil
}

// Build makes every image available on the engine.
func (b *Builder) Build(ctx context.Context) (Images, error) {
	if err := os.MkdirAll(b.Cache, 0o755); err != nil {
		return Images{}, err
	}
	base, baseKey, err := b.base(ctx)
	if err != nil {
		return Images{}, fmt.Errorf("base image: %w", err)
	}
	var imgs Images
	for _, img := range []struct {
		name string
		tag  *string
	}{{"postgres", &imgs.Postgres}, {"rabbitmq", &imgs.RabbitMQ}, {"go", &imgs.Go}, {"runtime", &imgs.Runtime}} {
		if *img.tag, err = b.service(ctx, img.name, base, baseKey); err != nil {
			return Images{}, fmt.Errorf("%s image: %w", img.name, err)
		}
	}
	if imgs.Walbox, err = b.walbox(ctx, imgs); err != nil {
		return Images{}, fmt.Errorf("walbox image: %w", err)
	}
	b.prune()
	return imgs, nil
}

// unused is how long a cached file may go unused before prune removes it.
const unused = 14 * 24 * time.Hour

// prune removes cached files that no run used for a while (a run marks what it uses), and what
// interrupted runs left: root file systems and image files half written a day ago.
func (b *Builder) prune() {
	for pattern, age := range map[string]time.Duration{"*.tar": unused, "rootfs-*": 24 * time.Hour, "*.tmp": 24 * time.Hour} {
		files, _ := filepath.Glob(filepath.Join(b.Cache, pattern))
		for _, f := range files {
			if info, err := os.Stat(f); err == nil && time.Since(info.ModTime()) > age {
				removeDir(f)
			}
		}
	}
}

// use marks a cached file as used now.
func use(file string) {
	now := time.Now()
	_ = os.Chtimes(file, now, now)
}

// baseSetup runs in the debootstrapped root: no services start during image builds, and apt
// installs no recommended packages.
const baseSetup = `printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d &&
printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' > /etc/apt/apt.conf.d/90walbox &&
apt-get clean && rm -rf /var/lib/apt/lists/*`

// base imports the Debian root file system, debootstrapping it first unless it is cached.
func (b *Builder) base(ctx context.Context) (tag, key string, err error) {
	mirror, err := testenv.DebianMirror()
	if err != nil {
		return "", "", err
	}
	key = hash(suite, mirror, "minbase", baseSetup)
	file := filepath.Join(b.Cache, "debian-"+suite+"-"+key+".tar")
	if _, err := os.Stat(file); err != nil {
		if err := b.debootstrap(ctx, file, mirror); err != nil {
			return "", "", err
		}
	}
	use(file)
	tag = "walbox-test/debian:" + key
	start := time.Now()
	if _, err := b.Engine.Docker(ctx, "import", file, tag); err != nil {
		return "", "", err
	}
	b.Logf("imported %s in %v", tag, time.Since(start).Round(time.Second))
	return tag, key, nil
}

func (b *Builder) debootstrap(ctx context.Context, file, mirror string) error {
	start := time.Now()
	work, err := os.MkdirTemp(b.Cache, "rootfs-")
	if err != nil {
		return err
	}
	defer removeDir(work) // unmounts what a failed debootstrap left mounted (proc, sys) first
	root := filepath.Join(work, "root")
	if err := testenv.Debootstrap(ctx, suite, root, mirror); err != nil {
		return err
	}
	if _, err := output(exec.CommandContext(ctx, "chroot", root, "/bin/sh", "-c", baseSetup)); err != nil {
		return err
	}
	tmp := filepath.Join(work, "rootfs.tar")
	if _, err := output(exec.CommandContext(ctx, "tar", "--numeric-owner", "-C", root, "-cf", tmp, ".")); err != nil {
		return err
	}
	if err := os.Rename(tmp, file); err != nil {
		return err
	}
	b.Logf("debootstrapped %s in %v", filepath.Base(file), time.Since(start).Round(time.Second))
	return nil
}

// service loads a service image from the cache, or builds it and saves it there.
func (b *Builder) service(ctx context.Context, name, base, baseKey string) (string, error) {
	files, err := fs.Sub(imageFiles, "images/"+name)
	if err != nil {
		return "", err
	}
	var extra []string // what else the image is made of, for its key
	var ctxDirs map[string]string
	if name == "go" {
		if extra, ctxDirs, err = b.goInputs(ctx); err != nil {
			return "", err
		}
	}
	key := hash(append([]string{baseKey, fsDigest(files)}, extra...)...)
	tag := "walbox-test/" + name + ":" + key
	file := filepath.Join(b.Cache, name+"-"+key+".tar")
	start := time.Now()
	if _, err := os.Stat(file); err == nil {
		if _, err := b.Engine.Docker(ctx, "load", "-q", "-i", file); err == nil {
			use(file)
			b.Logf("loaded %s in %v", tag, time.Since(start).Round(time.Second))
			return tag, nil
		}
		_ = os.Remove(file) // unreadable: build it again
	}
	if name == "go" {
		dirs, err := b.goContext(ctx, ctxDirs)
		if err != nil {
			return "", err
		}
		defer dirs.cleanup()
		ctxDirs = dirs.dirs
	}
	if err := b.build(ctx, tag, base, files, ctxDirs); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", file, os.Getpid()) // a concurrent run writes its own
	if _, err := b.Engine.Docker(ctx, "save", "-o", tmp, tag); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, file); err != nil {
		return "", err
	}
	b.Logf("built and cached %s in %v", tag, time.Since(start).Round(time.Second))
	return tag, nil
}

// walbox builds the project's Dockerfile as `docker-compose up --build` does, with only its base
// images swapped: the Go image for golang (its module cache makes the build offline) and the
// runtime image for distroless.
func (b *Builder) walbox(ctx context.Context, imgs Images) (string, error) {
	start := time.Now()
	tag := "walbox-test/walbox:dev"
	cmd := exec.CommandContext(ctx, b.Engine.docker, "build", "--network", "host",
		"--build-arg", "GO_IMAGE="+imgs.Go, "--build-arg", "RUNTIME_IMAGE="+imgs.Runtime, "-t", tag, b.Repo)
	cmd.Env = b.Engine.Env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker build %s: %w\n%s", tag, err, tail(string(out), 40))
	}
	b.Logf("built %s from the Dockerfile in %v", tag, time.Since(start).Round(time.Second))
	return tag, nil
}

// build runs docker build with a context of files plus directories (name in the context: path).
func (b *Builder) build(ctx context.Context, tag, base string, files fs.FS, dirs map[string]string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeContext(pw, files, dirs)) }()
	cmd := exec.CommandContext(ctx, b.Engine.docker, "build", "--network", "host", "--build-arg", "BASE="+base, "-t", tag, "-")
	cmd.Env = b.Engine.Env()
	cmd.Stdin = pr
	out, err := cmd.CombinedOutput()
	pr.Close()
	if err != nil {
		return fmt.Errorf("docker build %s: %w\n%s", tag, err, tail(string(out), 40))
	}
	return nil
}

// writeContext writes a build context tar: files at its root, each directory under its name.
func writeContext(w io.Writer, files fs.FS, dirs map[string]string) error {
	tw := tar.NewWriter(w)
	if err := addFS(tw, files); err != nil {
		return err
	}
	for name, dir := range dirs {
		if err := addDir(tw, name, dir); err != nil {
			return err
		}
	}
	return tw.Close()
}

// addFS adds the embedded files, scripts executable.
func addFS(tw *tar.Writer, files fs.FS) error {
	return fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		mode := int64(0o644)
		if strings.HasSuffix(p, ".sh") {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
}

// addDir adds dir's tree under prefix, keeping modes and symbolic links.
func addDir(tw *tar.Writer, prefix, dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = path.Join(prefix, filepath.ToSlash(rel))
		if d.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.Mode |= 0o600 // the module cache is read-only; the image's copy need not be
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
}

// hash returns a short hex digest of its arguments.
func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// fsDigest hashes the names and contents of every file in files.
func fsDigest(files fs.FS) string {
	var parts []string
	_ = fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			data, _ := fs.ReadFile(files, p)
			parts = append(parts, p, string(data))
		}
		return nil
	})
	return hash(parts...)
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
