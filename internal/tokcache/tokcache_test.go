package tokcache

import (
	"fmt"
	"testing"
)

func TestEviction(t *testing.T) {
	var c Cache
	c.Put(Key{Text: "keep"}, []int32{1})
	for i := range Entries {
		c.Put(Key{Text: fmt.Sprint(i)}, []int32{int32(i)})
		if i%1000 == 0 {
			// Used again, so it moves back to the current generation.
			if _, ok := c.Get(Key{Text: "keep"}); !ok {
				t.Fatalf("a recently used entry was evicted after %d puts", i)
			}
		}
	}
	if _, ok := c.Get(Key{Text: "0"}); ok {
		t.Fatal("the oldest unused entry should have been evicted")
	}
	if n := c.Len(); n > Entries {
		t.Fatalf("cache holds %d entries, bound is %d", n, Entries)
	}
}

func TestKeyTellsSpecialApart(t *testing.T) {
	var c Cache
	c.Put(Key{Text: "a", Special: true}, []int32{0, 97})
	if _, ok := c.Get(Key{Text: "a"}); ok {
		t.Fatal("a tokenization with special tokens answered one without")
	}
}

func ExampleCache() {
	var c Cache
	k := Key{Text: "At turn 1, you guessed 3."}
	if _, ok := c.Get(k); !ok {
		c.Put(k, []int32{1, 2, 3}) // what the model server answered
	}
	ids, ok := c.Get(k)
	fmt.Println(ids, ok)
	// Output: [1 2 3] true
}
