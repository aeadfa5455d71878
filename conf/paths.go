package conf

import "path/filepath"

// resolvePaths makes the file paths of the config (plugin executables,
// TLS certificates, keys and CA) absolute, a relative one taken from the
// directory of the config file, as a reader of the file expects and
// whatever the gateway's working directory is (a service manager may
// start it from "/"). Done once at load: a reload reads them again from
// the file.
func (c *Config) resolvePaths() {
	dir := filepath.Dir(c.File)
	for i := range c.Plugins {
		c.Plugins[i].Path = resolvePath(dir, c.Plugins[i].Path)
	}
	t := &c.Gateway.TLS
	t.ClientCAFile = resolvePath(dir, t.ClientCAFile)
	for i := range t.Certificates {
		t.Certificates[i].CertFile = resolvePath(dir, t.Certificates[i].CertFile)
		t.Certificates[i].KeyFile = resolvePath(dir, t.Certificates[i].KeyFile)
	}
}

// resolvePath is p made absolute from dir when relative; "" stays "".
func resolvePath(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	p = filepath.Join(dir, p)
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}
