package testenv

// Internals for the black-box tests.
var (
	Descendants      = descendants
	PidAlive         = pidAlive
	ParseListFile    = parseListFile
	ParseSourcesFile = parseSourcesFile
	OSRelease        = osRelease
	PortLockDir      = portLockDir
)

// ChrootRoot finds or builds the chroot of a release of suite with packages.
func ChrootRoot(suite string, packages []string, logf func(string, ...any)) (string, error) {
	return chrootRoot(release{suite, packages}, logf)
}
