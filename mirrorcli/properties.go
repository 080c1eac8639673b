package mirrorcli

import "github.com/kmirror/kmirror/internal/properties"

// Property is one key=value line of a Java properties file.
type Property = properties.Property

// ReadProperties reads a Java properties file (the format of Kafka's
// --command-config and client config files).
func ReadProperties(path string) ([]Property, error) { return properties.Read(path) }

// ParseProperties parses Java properties text (see properties.Parse).
func ParseProperties(text string) ([]Property, error) { return properties.Parse(text) }
