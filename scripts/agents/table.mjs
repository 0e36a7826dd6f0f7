// Checks the runs of scripts/check-agents.sh against what the gateway
// published and prints the markdown table of docs/gateway.md.
//
//   node scripts/agents/table.mjs RESULTS.jsonl TRAJECTORIES.jsonl FAILURES.jsonl
//
// RESULTS holds the framework scripts' result lines. A run works when its
// script succeeded and the gateway published exactly one trajectory for its
// session (episode id = session id, no "<session>/seg<k>"), with one turn
// and one action range per model call, whose tokens end with the last
// call's completion: the very token ids when the API returned them, else
// as many tokens as the call's usage counted. Failure records of sessions no
// run named (the gateway opened them for calls it could not attribute) are
// counted below the table. A run of a group of samples (openai-group.mjs)
// prints a line per sample, each checked as a run, and in its group (group_id,
// sample_index, group_size). Exits 1 when a run does not work.
import { readFileSync } from "node:fs";

const lines = (file) =>
  readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l));
const [resultsFile, trajFile, failuresFile] = process.argv.slice(2);
const results = lines(resultsFile);
const trajs = lines(trajFile);
const failures = failuresFile ? lines(failuresFile) : [];

/** check returns the problems of one run's trajectories, none when it works. */
function check(r, segments) {
  const problems = [];
  if (!r.ok) problems.push(r.error);
  if (r.calls === 0) return problems;
  const wantStreamed = r.stream_calls ?? (r.stream ? r.calls : 0);
  if (r.streamed !== wantStreamed) problems.push(`${r.streamed} of ${r.calls} calls answered with an event stream, want ${wantStreamed}`);
  if (segments.length !== 1) problems.push(`${segments.length} trajectories for the session: ${segments.map((t) => t.episode_id).join(", ")}`);
  const t = segments.find((s) => s.episode_id === r.session);
  if (!t) return [...problems, "no trajectory with episode id = session id"];
  if (t.turns !== r.calls) problems.push(`turns ${t.turns} != calls ${r.calls}`);
  const g = r.group ?? { id: r.session, index: 0, size: 1 };
  if (t.group_id !== g.id || t.sample_index !== g.index || t.group_size !== g.size) {
    problems.push(`recorded as sample ${t.sample_index} of ${t.group_size} in group ${t.group_id}, want ${g.index} of ${g.size} in ${g.id}`);
  }
  if (t.action_ranges.length !== t.turns) problems.push(`${t.action_ranges.length} action ranges for ${t.turns} turns`);
  const obs = t.observation_tokens;
  const [start, end] = t.action_ranges.at(-1) ?? [0, 0];
  if (end !== obs.length) problems.push(`last action range ends at ${end}, not at the end of ${obs.length} tokens`);
  if (segments.length === 1 && r.last_token_ids) {
    const tail = obs.slice(obs.length - r.last_token_ids.length);
    if (tail.join() !== r.last_token_ids.join()) problems.push("observation tokens do not end with the last call's token ids");
    if (end - start !== r.last_token_ids.length) problems.push(`last action range holds ${end - start} tokens, the call returned ${r.last_token_ids.length}`);
  } else if (segments.length === 1 && r.last_completion_tokens != null && end - start !== r.last_completion_tokens) {
    problems.push(`last action range holds ${end - start} tokens, usage counted ${r.last_completion_tokens}`);
  }
  return problems;
}

let fail = false;
const rows = [];
for (const r of results) {
  const segments = trajs.filter((t) => t.episode_id === r.session || t.episode_id.startsWith(`${r.session}/seg`));
  const sessions = new Set(segments.map((t) => t.info?.session_id ?? t.episode_id.split("/")[0])).size;
  const problems = check(r, segments);
  fail ||= problems.length > 0;
  const tokens = r.last_token_ids ? "token ids" : r.last_completion_tokens != null ? "lengths" : "-";
  const works = problems.length === 0 ? `yes (${tokens})` : `**no**: ${problems.join("; ").replaceAll("|", "\\|")}`;
  rows.push(`| ${r.framework} | ${r.api ?? "-"} | ${r.stream ? "yes" : "no"} | ${r.calls} | ${works} | ${sessions} | ${segments.length} |`);
}
const named = new Set(results.map((r) => r.session));
const orphans = failures.filter((f) => !named.has(String(f.episode_id ?? "").split("/")[0]));

console.log("| framework | API | streaming | model calls | works | sessions recorded | segments |");
console.log("|---|---|---|---|---|---|---|");
for (const row of rows) console.log(row);
console.log(`\nFailure records of sessions no run named: ${orphans.length}.`);
process.exit(fail ? 1 : 0);
