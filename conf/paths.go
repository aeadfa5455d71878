package conf

import "path/filepath"

// resolvePaths makes the file paths of the config (plugin executables,
// TLS certificates, keys and CAs, the listener's and the pools', and an
// ACME storage directory) absolute, a relative one taken from the
// directory of the config file, as a reader of the file expects and
// whatever the gateway's working directory is (a service manager may
// start it from "/"). Done once at load: a reload reads them again from
// the file.
func (c *Config) resolvePaths() {
	dir := filepath.Dir(c.File)
	absDir := dir
	if a, err := filepath.Abs(dir); err == nil {
		absDir = a
	}
	for i := range c.Plugins {
		c.resolvePath(dir, &c.Plugins[i].Path)
		c.Plugins[i].ConfigDir = absDir
	}
	t := &c.Gateway.TLS
	c.resolvePath(dir, &t.ClientCAFile)
	for i := range t.Certificates {
		c.resolvePath(dir, &t.Certificates[i].CertFile)
		c.resolvePath(dir, &t.Certificates[i].KeyFile)
	}
	if a := t.ACME; a != nil {
		c.resolvePath(dir, &a.CAFile)
		if !IsRedisStorage(a.Storage) {
			c.resolvePath(dir, &a.Storage)
		}
	}
	for i := range c.Pools {
		if pt := c.Pools[i].TLS; pt != nil {
			c.resolvePath(dir, &pt.CAFile)
			c.resolvePath(dir, &pt.CertFile)
			c.resolvePath(dir, &pt.KeyFile)
		}
	}
}

// resolvePath makes *p absolute from dir when relative, and remembers it
// was; "" stays "".
func (c *Config) resolvePath(dir string, p *string) {
	if *p == "" || filepath.IsAbs(*p) {
		return
	}
	abs := filepath.Join(dir, *p)
	if a, err := filepath.Abs(abs); err == nil {
		abs = a
	}
	if c.relative == nil {
		c.relative = make(map[string]bool)
	}
	c.relative[abs] = true
	*p = abs
}

// FromRelative reports whether path, as the config now holds it, was
// written as a relative path and made absolute from the config file's
// directory: an error about a missing file can then say so.
func (c *Config) FromRelative(path string) bool { return c.relative[path] }
