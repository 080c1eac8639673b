package main

import (
	"fmt"
	"go/token"
	"strconv"
	"strings"
)

// The definition language, one file per API plus shared.def for element
// types that several APIs use. A file is a sequence of blocks:
//
//	// Doc comment of the API, emitted as the comment block before its types.
//	api CreateMirror key 1000 versions 0 flexible 0+
//
//	// CreateMirrorRequest creates a mirror.      (the type's doc comment)
//	struct CreateMirrorRequest request
//	  MirrorName: string
//	  Configs: [CreateMirrorRequestConfig]
//	  // RecoverState (tag 0): rebuild the lost state of this mirror.
//	  RecoverState: bool tag 0
//
//	struct CreateMirrorRequestConfig
//	  Name: string
//	  Value: nullable-string // a trailing comment stays a trailing comment
//
// A field is "Name: type [as GoType] [= default] [tag N] [// comment]":
//   - type is bool, int8, int16, int32, int64, uuid, string, nullable-string,
//     or an array [string], [int32] or [StructName];
//   - "as GoType" stores an integer under a named Go type (int8 as MirrorState);
//   - "= default" is a Go expression for a default other than Go's zero
//     value: the struct then gets Default and NewX (kmsg's convention), and
//     a tagged field at its default is left off the wire;
//   - "tag N" makes it a tagged field (KIP-482), written only when it is not
//     at its default (zero, empty, nil or the declared default).
//
// Every struct gets an UnknownTags field and every request and response a
// Version field. "versions A" or "versions A-B" are the versions the API
// supports; "flexible F+" is its first flexible version, which must be A:
// the codec writes compact (flexible) encodings only.

// api is one mirror RPC: a key with a request and a response.
type api struct {
	Name               string
	Key                int
	Min, Max, Flexible int
	Doc                []string
	Request, Response  *structDef
	pos                string
}

// structDef is a request, a response or an element struct.
type structDef struct {
	Name   string
	Kind   string   // "request", "response" or "" for an element
	API    *api     // set for requests and responses
	Lead   []string // a comment block of its own, written above Doc
	Doc    []string
	Fields []*field
	pos    string
}

// field is one field of a struct.
type field struct {
	Name    string
	Doc     []string
	Comment string // trailing comment
	Type    fieldType
	Default string // Go expression; "" for Go's zero value
	Tag     int    // -1: not tagged
	pos     string
}

// fieldType is a wire type: a scalar, or an array of Elem.
type fieldType struct {
	Wire   string // scalar wire type, or the element's for arrays
	GoType string // named Go type for an integer ("as"); "" otherwise
	Array  bool
	Struct bool // Array of structs named Wire
}

// definitions is everything read from one definitions folder.
type definitions struct {
	APIs    []*api       // in file order; sorted by key before emitting
	Structs []*structDef // in file order
}

var scalarTypes = map[string]bool{
	"bool": true, "int8": true, "int16": true, "int32": true, "int64": true,
	"uuid": true, "string": true, "nullable-string": true,
}

// parser reads one file into defs.
type parser struct {
	defs    *definitions
	file    string
	line    int
	doc     []string   // comment lines waiting for what they document
	lead    []string   // comment paragraphs that document nothing, for the next struct
	cur     *structDef // struct whose fields are being read
	fileAPI *api
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", p.file, p.line, fmt.Sprintf(format, args...))
}

func (p *parser) pos() string { return fmt.Sprintf("%s:%d", p.file, p.line) }

// parseFile adds the definitions of one file to defs.
func parseFile(defs *definitions, name, src string) error {
	p := &parser{defs: defs, file: name}
	for i, raw := range strings.Split(src, "\n") {
		p.line = i + 1
		if err := p.parseLine(strings.TrimRight(raw, " \t\r")); err != nil {
			return err
		}
	}
	if len(p.doc)+len(p.lead) > 0 {
		return p.errorf("comment at the end of the file documents nothing")
	}
	return nil
}

func (p *parser) parseLine(line string) error {
	indented := strings.HasPrefix(line, "  ")
	text := strings.TrimSpace(line)
	switch {
	case text == "":
		if len(p.doc) > 0 && p.cur != nil {
			return p.errorf("blank line after a field comment: a comment must stand right above its field")
		}
		// A comment paragraph on its own stays a comment of its own,
		// written above the next struct's doc comment.
		if len(p.doc) > 0 && len(p.lead) > 0 {
			p.lead = append(p.lead, "")
		}
		p.lead = append(p.lead, p.takeDoc()...)
		p.cur = nil
		return nil
	case strings.HasPrefix(text, "//"):
		if indented && p.cur == nil {
			return p.errorf("indented comment outside a struct (a blank line ends a struct)")
		}
		if !indented {
			p.cur = nil // a comment at the margin starts the next block
		}
		p.doc = append(p.doc, strings.TrimPrefix(strings.TrimPrefix(text, "//"), " "))
		return nil
	case indented:
		if p.cur == nil {
			return p.errorf("indented field outside a struct (a blank line ends a struct)")
		}
		f, err := p.parseField(text)
		if err != nil {
			return err
		}
		p.cur.Fields = append(p.cur.Fields, f)
		return nil
	}
	words := strings.Fields(text)
	switch words[0] {
	case "api":
		return p.parseAPI(words)
	case "struct":
		return p.parseStruct(words)
	}
	return p.errorf("unknown line %q: want api, struct, an indented field or a // comment", text)
}

func (p *parser) takeDoc() []string {
	doc := p.doc
	p.doc = nil
	return doc
}

// parseAPI reads "api NAME key K versions A[-B] flexible F+".
func (p *parser) parseAPI(words []string) error {
	if len(words) != 8 || words[2] != "key" || words[4] != "versions" || words[6] != "flexible" {
		return p.errorf("want \"api NAME key K versions A[-B] flexible F+\", got %q", strings.Join(words, " "))
	}
	if p.fileAPI != nil {
		return p.errorf("second api in one file: one file per API")
	}
	if len(p.lead) > 0 {
		return p.errorf("a blank line parts the api line from its comment")
	}
	a := &api{Name: words[1], Doc: p.takeDoc(), pos: p.pos()}
	if !isExported(a.Name) {
		return p.errorf("api name %q is not an exported Go identifier", a.Name)
	}
	var err error
	if a.Key, err = p.number(words[3], "key"); err != nil {
		return err
	}
	lo, hi, ranged := strings.Cut(words[5], "-")
	if !ranged {
		hi = lo
	}
	if a.Min, err = p.number(lo, "versions"); err != nil {
		return err
	}
	if a.Max, err = p.number(hi, "versions"); err != nil {
		return err
	}
	flexible, plus := strings.CutSuffix(words[7], "+")
	if !plus {
		return p.errorf("flexible %q: want the first flexible version followed by +", words[7])
	}
	if a.Flexible, err = p.number(flexible, "flexible"); err != nil {
		return err
	}
	switch {
	case a.Min > a.Max:
		return p.errorf("versions %s: the first is above the last", words[5])
	case a.Flexible != a.Min:
		return p.errorf("flexible %s: the codec writes flexible encodings only, so the API must be flexible from v%d", words[7], a.Min)
	}
	p.fileAPI = a
	p.defs.APIs = append(p.defs.APIs, a)
	return nil
}

func (p *parser) number(s, what string) (int, error) {
	n, err := strconv.ParseInt(s, 10, 16)
	if err != nil || n < 0 {
		return 0, p.errorf("%s %q: want a number from 0 to 32767", what, s)
	}
	return int(n), nil
}

// parseStruct reads "struct NAME [request|response]".
func (p *parser) parseStruct(words []string) error {
	if len(words) < 2 || len(words) > 3 {
		return p.errorf("want \"struct NAME [request|response]\", got %q", strings.Join(words, " "))
	}
	s := &structDef{Name: words[1], Lead: p.lead, Doc: p.takeDoc(), pos: p.pos()}
	p.lead = nil
	if !isExported(s.Name) {
		return p.errorf("struct name %q is not an exported Go identifier", s.Name)
	}
	if len(words) == 3 {
		if err := p.attach(s, words[2]); err != nil {
			return err
		}
	}
	p.cur = s
	p.defs.Structs = append(p.defs.Structs, s)
	return nil
}

// attach makes s the request or response of the file's API.
func (p *parser) attach(s *structDef, kind string) error {
	a := p.fileAPI
	if a == nil {
		return p.errorf("struct %s is a %s, but no api line comes before it", s.Name, kind)
	}
	slot := map[string]**structDef{"request": &a.Request, "response": &a.Response}[kind]
	switch {
	case slot == nil:
		return p.errorf("struct kind %q: want request or response", kind)
	case *slot != nil:
		return p.errorf("api %s has a second %s", a.Name, kind)
	case s.Name != a.Name+strings.ToUpper(kind[:1])+kind[1:]:
		return p.errorf("the %s of api %s must be named %s%s%s", kind, a.Name, a.Name, strings.ToUpper(kind[:1]), kind[1:])
	}
	s.Kind, s.API, *slot = kind, a, s
	return nil
}

// parseField reads "Name: type [as GoType] [= default] [tag N] [// comment]".
func (p *parser) parseField(text string) (*field, error) {
	f := &field{Doc: p.takeDoc(), Tag: -1, pos: p.pos()}
	if body, comment, ok := strings.Cut(text, "//"); ok {
		text, f.Comment = strings.TrimSpace(body), strings.TrimSpace(comment)
	}
	name, rest, ok := strings.Cut(text, ":")
	if !ok {
		return nil, p.errorf("field %q: want \"Name: type\"", text)
	}
	f.Name = strings.TrimSpace(name)
	if !isExported(f.Name) || f.Name == "Version" || f.Name == "UnknownTags" {
		return nil, p.errorf("field name %q: want an exported Go identifier other than Version and UnknownTags", f.Name)
	}
	words := strings.Fields(rest)
	if len(words) == 0 {
		return nil, p.errorf("field %s has no type", f.Name)
	}
	var err error
	if f.Type, err = p.parseType(words[0]); err != nil {
		return nil, err
	}
	return f, p.parseModifiers(f, words[1:])
}

func (p *parser) parseType(word string) (fieldType, error) {
	if elem, ok := strings.CutPrefix(word, "["); ok {
		elem, ok = strings.CutSuffix(elem, "]")
		switch {
		case !ok:
			return fieldType{}, p.errorf("type %q: an array is [element]", word)
		case elem == "string", elem == "int32":
			return fieldType{Wire: elem, Array: true}, nil
		case scalarTypes[elem]:
			return fieldType{}, p.errorf("type %q: arrays of %s are not supported (only [string], [int32] and arrays of structs)", word, elem)
		case !isExported(elem):
			return fieldType{}, p.errorf("type %q: the element must be a struct defined in the definitions", word)
		}
		return fieldType{Wire: elem, Array: true, Struct: true}, nil
	}
	if !scalarTypes[word] {
		return fieldType{}, p.errorf("unknown type %q", word)
	}
	return fieldType{Wire: word}, nil
}

// parseModifiers reads what follows a field's type: as, =, tag.
func (p *parser) parseModifiers(f *field, words []string) error {
	for len(words) > 0 {
		switch {
		case words[0] == "as" && len(words) > 1:
			if !strings.HasPrefix(f.Type.Wire, "int") || f.Type.Array || !token.IsIdentifier(words[1]) {
				return p.errorf("field %s: \"as\" names a Go type for an integer field", f.Name)
			}
			f.Type.GoType, words = words[1], words[2:]
		case words[0] == "=" && len(words) > 1:
			end := 1
			for end < len(words) && words[end] != "tag" {
				end++
			}
			if f.Type.Array {
				return p.errorf("field %s: arrays cannot have a default", f.Name)
			}
			f.Default, words = strings.Join(words[1:end], " "), words[end:]
		case words[0] == "tag" && len(words) > 1:
			tag, err := strconv.Atoi(words[1])
			if err != nil || tag < 0 || tag > 63 {
				return p.errorf("field %s: tag %q: want a number from 0 to 63", f.Name, words[1])
			}
			f.Tag, words = tag, words[2:]
		default:
			return p.errorf("field %s: unexpected %q after the type", f.Name, strings.Join(words, " "))
		}
	}
	return nil
}

func isExported(name string) bool {
	return token.IsIdentifier(name) && token.IsExported(name)
}
