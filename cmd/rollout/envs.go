package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/rollfleet/rollfleet/envs"
)

type envsCmd struct{}

func (envsCmd) Run() error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tFAMILY\tPARAMETERS\tMAX TURNS")
	for _, s := range envs.Specs() {
		params, err := json.Marshal(s.Params)
		if err != nil {
			return fmt.Errorf("env %s: %w", s.ID, err)
		}
		turns := "drawn at reset"
		if s.MaxTurns > 0 {
			turns = strconv.Itoa(s.MaxTurns)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.ID, s.Family, params, turns)
	}
	return w.Flush()
}
