package jobs

import (
	"reflect"
	"strings"
	"testing"
)

// NeMo Gym numbers identical rows alike in order of first appearance, keeps
// a row's own _ng_task_index, and counts each task's rollouts across every
// use of its rows (aabbcc), so that no (task, rollout) pair repeats.
func TestNeMoGymIndices(t *testing.T) {
	a, b := `{"question": "a", "expected_answer": "1"}`, `{"question": "b", "expected_answer": "2"}`
	own := `{"question": "c", "expected_answer": "3", "_ng_task_index": 7}`
	for _, tc := range []struct {
		name           string
		lines          []string
		n, episodes    int
		tasks, rollout []int32
	}{
		{"distinct rows", []string{a, b}, 2, 0, []int32{0, 0, 1, 1}, []int32{0, 1, 0, 1}},
		{"identical rows share a task", []string{a, b, a}, 2, 0, []int32{0, 0, 1, 1, 0, 0}, []int32{0, 1, 0, 1, 2, 3}},
		{"rows reused", []string{a, b}, 1, 6, []int32{0, 1, 0, 1, 0, 1}, []int32{0, 0, 1, 1, 2, 2}},
		{"reused with duplicates", []string{a, a}, 2, 8, []int32{0, 0, 0, 0, 0, 0, 0, 0}, []int32{0, 1, 2, 3, 4, 5, 6, 7}},
		{"own index kept, not counted", []string{own, a, b}, 1, 0, []int32{7, 0, 1}, []int32{0, 0, 0}},
		{"white space makes a different row", []string{a, strings.Replace(a, ": ", ":", 1)}, 1, 0, []int32{0, 1}, []int32{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := ParseDataset([]byte(strings.Join(tc.lines, "\n")))
			if err != nil {
				t.Fatal(err)
			}
			seed := uint64(1)
			reqs, err := New(Options{NSamples: tc.n, Episodes: tc.episodes, Seed: &seed}, rows)
			if err != nil {
				t.Fatal(err)
			}
			var tasks, rollouts []int32
			for i := range reqs.Len() {
				q, err := reqs.Request(i)
				if err != nil {
					t.Fatal(err)
				}
				tasks, rollouts = append(tasks, q.TaskIndex), append(rollouts, q.RolloutIndex)
			}
			if !reflect.DeepEqual(tasks, tc.tasks) || !reflect.DeepEqual(rollouts, tc.rollout) {
				t.Fatalf("tasks %v rollouts %v, want %v %v", tasks, rollouts, tc.tasks, tc.rollout)
			}
		})
	}
	if _, err := ParseDataset([]byte(`{"question": "a", "expected_answer": "1", "_ng_task_index": -1}`)); err == nil {
		t.Error("negative _ng_task_index accepted")
	}
}
