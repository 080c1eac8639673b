package main

import (
	"cmp"
	"fmt"
	"slices"
)

// check validates what no single line can: names across files, references,
// tags, and the key table. It sorts defs.APIs by key.
func check(defs *definitions) error {
	structs := make(map[string]*structDef, len(defs.Structs))
	for _, s := range defs.Structs {
		if prev, ok := structs[s.Name]; ok {
			return fmt.Errorf("%s: struct %s is defined twice (first at %s)", s.pos, s.Name, prev.pos)
		}
		structs[s.Name] = s
	}
	for _, s := range defs.Structs {
		if err := checkStruct(s, structs); err != nil {
			return err
		}
	}
	return checkAPIs(defs.APIs)
}

func checkStruct(s *structDef, structs map[string]*structDef) error {
	names := make(map[string]bool)
	tags := make(map[int]bool)
	for _, f := range s.Fields {
		switch {
		case names[f.Name]:
			return fmt.Errorf("%s: field %s appears twice in %s", f.pos, f.Name, s.Name)
		case f.Tag >= 0 && tags[f.Tag]:
			return fmt.Errorf("%s: tag %d appears twice in %s", f.pos, f.Tag, s.Name)
		case f.Type.Struct && structs[f.Type.Wire] == nil:
			return fmt.Errorf("%s: field %s: no struct %s is defined", f.pos, f.Name, f.Type.Wire)
		case f.Type.Struct && structs[f.Type.Wire].Kind != "":
			return fmt.Errorf("%s: field %s: %s is a %s, not an element", f.pos, f.Name, f.Type.Wire, structs[f.Type.Wire].Kind)
		}
		names[f.Name] = true
		if f.Tag >= 0 {
			tags[f.Tag] = true
		}
	}
	if s.Kind == "response" {
		// kgo and the proxy read the throttle from the first four bytes.
		if len(s.Fields) == 0 || s.Fields[0].Name != "ThrottleMillis" || s.Fields[0].Type != (fieldType{Wire: "int32"}) || s.Fields[0].Tag >= 0 {
			return fmt.Errorf("%s: response %s must start with \"ThrottleMillis: int32\"", s.pos, s.Name)
		}
	}
	return nil
}

// checkAPIs sorts apis by key and checks that each has a request and a
// response and that the keys are contiguous: MirrorKeyIndex relies on it.
func checkAPIs(apis []*api) error {
	slices.SortFunc(apis, func(a, b *api) int { return cmp.Compare(a.Key, b.Key) })
	names := make(map[string]bool)
	for i, a := range apis {
		switch {
		case a.Request == nil || a.Response == nil:
			return fmt.Errorf("%s: api %s needs a struct %sRequest request and a struct %sResponse response", a.pos, a.Name, a.Name, a.Name)
		case names[a.Name]:
			return fmt.Errorf("%s: api %s is defined twice", a.pos, a.Name)
		case i > 0 && a.Key != apis[i-1].Key+1:
			return fmt.Errorf("%s: api %s has key %d, but the keys must be contiguous: the one before is %s at %d",
				a.pos, a.Name, a.Key, apis[i-1].Name, apis[i-1].Key)
		}
		names[a.Name] = true
	}
	return nil
}
