// Package plural writes counts in English for messages people read: "1
// topic", "2 topics". Every noun kmirror counts takes a plain -s.
package plural

import "strconv"

// Of is n and the noun, plural unless n is 1: Of(1, "topic") is "1 topic".
func Of(n int, noun string) string { return strconv.Itoa(n) + " " + Word(n, noun) }

// Word is the noun alone, plural unless n is 1.
func Word(n int, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}
