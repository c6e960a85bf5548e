/* policy_rules.h: every verification rule, one line each, in the order of
 * their kinds: POLICY_RULE(KIND, name) declares the rule `policy_rule_name`
 * written in lib/speculate/policy_NAME.c. Adding a rule is its file, its line here
 * and its tests; the kinds (policy.h), the name lookup, the programs' help
 * and errors and the protocol's validation follow from this list.
 */
POLICY_RULE(SD, sd)
POLICY_RULE(SSD, ssd)
POLICY_RULE(PCG, pcg)
POLICY_RULE(GREEDY, greedy)
POLICY_RULE(TYPICAL, typical)
POLICY_RULE(TOPK, topk)
POLICY_RULE(LANTERN, lantern)
