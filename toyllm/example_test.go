package toyllm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"strings"

	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/toyllm"
)

func ExampleServer_Start() {
	srv := toyllm.New(toyllm.Options{Logger: slog.New(slog.DiscardHandler)})
	url, stop, err := srv.Start(context.Background(), "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer stop()

	// A first turn of GuessTheNumber, as token ids, decoded greedily.
	prompt := srv.Tokenizer().Encode(chat.Render([]chat.Message{{
		Role:    "user",
		Content: "You have to guess the number between 1 and 50 (inclusive) within 7 turns.",
	}}, true))
	body, err := json.Marshal(map[string]any{
		"prompt": prompt, "max_tokens": 64, "temperature": 0,
		"logprobs": 0, "return_token_ids": true, "skip_special_tokens": false,
	})
	if err != nil {
		log.Fatal(err)
	}
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Text         string  `json:"text"`
			FinishReason string  `json:"finish_reason"`
			StopReason   any     `json:"stop_reason"`
			TokenIDs     []int32 `json:"token_ids"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		log.Fatal(err)
	}
	c := out.Choices[0]
	fmt.Println(c.Text)
	fmt.Println(c.FinishReason, c.StopReason, c.TokenIDs[len(c.TokenIDs)-1])
	// Output:
	// It is between 1 and 50, so I try 25. \boxed{25}
	// stop 258 258
}

func ExampleTokenizer() {
	var tok toyllm.Tokenizer
	ids := tok.Encode("<|im_start|>user\nhé<|im_end|>")
	fmt.Println(ids)
	fmt.Println(tok.Decode(ids))
	// Output:
	// [257 117 115 101 114 10 104 195 169 258]
	// <|im_start|>user
	// hé<|im_end|>
}
