package config

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// checkUpstream checks the fields that say where and how m is called, and
// fills in its Shape (and a bedrock model's default base URL).
func (m *Model) checkUpstream(field func(string) string) error {
	switch m.Provider {
	case OpenAI, Anthropic:
		if m.Shape == "" {
			m.Shape = m.Provider
		}
		if m.Shape != m.Provider {
			return fmt.Errorf("%s: an %s model takes %s requests; shape is for bedrock models", field("shape"), m.Provider, m.Provider)
		}
		if m.Region != "" || len(m.Regions) > 0 {
			return fmt.Errorf("%s: only bedrock models have a region", field("region"))
		}
		if err := checkBaseURL(m.Provider, m.BaseURL); err != nil {
			return fmt.Errorf("%s: %w", field("base_url"), err)
		}
		return nil
	case Bedrock:
		return m.checkBedrock(field)
	}
	return fmt.Errorf("%s: %q is not openai, anthropic or bedrock", field("provider"), m.Provider)
}

var awsRegion = regexp.MustCompile(`^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]$`)

// checkBedrock checks a bedrock model (README "Amazon Bedrock").
func (m *Model) checkBedrock(field func(string) string) error {
	switch m.Shape {
	case Anthropic, OpenAI:
	default:
		return fmt.Errorf("%s: %q is not anthropic (Claude, through InvokeModel) or openai (Bedrock's Chat Completions)", field("shape"), m.Shape)
	}
	if !awsRegion.MatchString(m.Region) {
		return fmt.Errorf("%s: %q is not an AWS region (like us-east-1)", field("region"), m.Region)
	}
	if m.UpstreamModel == "" || strings.HasPrefix(m.UpstreamModel, "arn:") {
		return fmt.Errorf("%s: a bedrock model needs its Bedrock model or inference profile id, like anthropic.claude-haiku-4-5-20251001-v1:0 (not an ARN)", field("upstream_model"))
	}
	if m.BaseURL == "" {
		m.BaseURL = "https://bedrock-runtime." + m.Region + ".amazonaws.com"
	} else if u, err := url.Parse(m.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		// The adapter adds /model/…/invoke or /openai/v1/…; a path here
		// would be added to twice.
		return fmt.Errorf("%s: %q: a bedrock model's base_url (optional) is the runtime endpoint alone, like https://bedrock-runtime.%s.amazonaws.com", field("base_url"), m.BaseURL, m.Region)
	}
	_, global, profile := m.InferenceProfile()
	switch {
	case !profile && len(m.Regions) > 0:
		return fmt.Errorf("%s: only an inference profile (us.…, eu.…, global.…) routes to other regions", field("regions"))
	case profile && global && len(m.Regions) > 0:
		return fmt.Errorf("%s: a global inference profile routes to every commercial region; leave regions out", field("regions"))
	case profile && !global && !slices.Contains(m.Regions, m.Region):
		return fmt.Errorf("%s: inference profile %s needs the regions it routes to (Bedrock console, Cross-region inference), %s among them, so the deployment can grant the model in each", field("regions"), m.UpstreamModel, m.Region)
	}
	for _, r := range m.Regions {
		if !awsRegion.MatchString(r) {
			return fmt.Errorf("%s: %q is not an AWS region", field("regions"), r)
		}
	}
	return nil
}

// profileGeos are the prefixes of Bedrock's cross-region inference
// profile ids: us.anthropic.claude-… runs anthropic.claude-… in US regions.
var profileGeos = []string{"us", "us-gov", "eu", "apac", "jp", "au", "ca", "global"}

// InferenceProfile reports whether a bedrock model's upstream_model is a
// cross-region inference profile, the foundation model it runs, and
// whether it is a global one.
func (m Model) InferenceProfile() (foundation string, global, ok bool) {
	geo, rest, found := strings.Cut(m.UpstreamModel, ".")
	if m.Provider != Bedrock || !found || !slices.Contains(profileGeos, geo) {
		return "", false, false
	}
	return rest, geo == "global", true
}

// BedrockARNs lists what bedrock:InvokeModel must be allowed on to call a
// bedrock model, and nothing more: the foundation model in its region, or
// an inference profile and its foundation model in each region the profile
// routes to (every region for a global one). partition and account are the
// deployment's.
func (m Model) BedrockARNs(partition, account string) []string {
	if m.Provider != Bedrock {
		return nil
	}
	model := func(region, id string) string {
		return "arn:" + partition + ":bedrock:" + region + "::foundation-model/" + id
	}
	foundation, global, ok := m.InferenceProfile()
	if !ok {
		return []string{model(m.Region, m.UpstreamModel)}
	}
	out := []string{"arn:" + partition + ":bedrock:" + m.Region + ":" + account + ":inference-profile/" + m.UpstreamModel}
	if global {
		return append(out, model("*", foundation))
	}
	for _, r := range m.Regions {
		out = append(out, model(r, foundation))
	}
	return out
}

// Partition is the AWS partition of region, for its ARNs.
func Partition(region string) string {
	switch {
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov"
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn"
	}
	return "aws"
}
