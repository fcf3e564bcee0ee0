package wire_test

import (
	"fmt"

	"github.com/ukeys/ukeys/wire"
)

// A client sets a request from the table's arguments, in add_key(2)'s
// order; the server decodes it and reads the arguments back by position,
// its strings cut at their first NUL byte as the kernel cuts them.
func ExampleSpec_Check() {
	var out wire.Request
	if err := out.Set(wire.OpAddKey, wire.Str("user"), wire.Str("name\x00ignored"), wire.Bytes([]byte("secret")), wire.Int(-3)); err != nil {
		panic(err)
	}
	body, _ := wire.AppendRequest(nil, &out)

	var in wire.Request
	if err := in.Decode(body); err != nil {
		panic(err)
	}
	spec := wire.SpecOf(in.Op)
	args, err := spec.Check(&in)
	if err != nil {
		panic(err)
	}
	fmt.Println(spec.Name, args.Str(0), args.Str(1), len(args.Bytes(2)), args.Serial(3))
	for i, a := range spec.Args {
		fmt.Printf("add_key argument %d: %s (%v)\n", a.Reg, a.Name, spec.Args[i].Kind)
	}
	// Output:
	// add_key user name 6 -3
	// add_key argument 1: type (string)
	// add_key argument 2: description (optional string)
	// add_key argument 3: payload (bytes)
	// add_key argument 5: ring (int)
}
