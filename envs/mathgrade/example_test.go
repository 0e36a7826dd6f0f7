package mathgrade_test

import (
	"fmt"

	"github.com/rollfleet/rollfleet/envs/mathgrade"
)

// Grading a rollout: the last boxed answer is compared with the reference.
func Example_grade() {
	r := mathgrade.Grade(`The area is $\frac{3}{4}$ of 2, so \boxed{\dfrac{3}{2}}.`, `$1.5$`)
	fmt.Println(r.Reward, r.Extracted, r.Expected, r.Matched)

	r = mathgrade.Grade(`I think it is \boxed{0.333}.`, `\frac{1}{3}`)
	fmt.Println(r.Reward, r.Extracted, r.Matched)

	r = mathgrade.Grade(`No idea.`, `7`)
	fmt.Println(r.Reward, r.Extracted == "", r.Matched)

	fmt.Println(mathgrade.Equivalent(`[1,3)`, `[1,3]`), mathgrade.Equivalent(`\sqrt{8}`, `2\sqrt{2}`))
	// Output:
	// 1 \dfrac{3}{2} 1.5 true
	// 0 0.333 false
	// 0 true false
	// false true
}
