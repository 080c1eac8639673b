// Package enumname names the values of small integer enums from a table, so
// each enum's String method is its table and one line instead of a switch.
package enumname

import "fmt"

// Of returns names[v] when v indexes a non-empty entry; any other value
// prints as typ(v), the way a Go switch's default case would, so a
// corrupted or future value is still visible in logs.
func Of[T ~int8](v T, typ string, names []string) string {
	if v >= 0 && int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, int8(v))
}
