package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Secrets are the provider host keys, one Secrets Manager secret per
// api_key_env of the models file, named SecretPrefix + api_key_env so the
// functions find them by name. The stack creates them with a random
// placeholder; the operator puts the real key (README).
type Secrets struct {
	Scope constructs.Construct
	All   []awssecretsmanager.Secret // in models file order
}

func NewSecrets(scope constructs.Construct, props RelayProps) *Secrets {
	c := constructs.NewConstruct(scope, jsii.String("Secrets"))
	s := &Secrets{Scope: c}
	seen := map[string]bool{}
	for _, m := range props.Models.Models {
		env := m.APIKeyEnv
		if env == "" || seen[env] {
			continue
		}
		seen[env] = true
		sec := awssecretsmanager.NewSecret(c, jsii.String(logicalName(env)), &awssecretsmanager.SecretProps{
			SecretName:  jsii.String(props.SecretPrefix() + env),
			Description: jsii.String(fmt.Sprintf("%s provider key %s: put the real key with `aws secretsmanager put-secret-value`", props.Prefix, env)),
			GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
				ExcludePunctuation: jsii.Bool(true),
			},
		})
		s.All = append(s.All, sec)
	}
	return s
}

// GrantRead lets role read every provider key, and nothing else.
func (s *Secrets) GrantRead(role awsiam.IRole) {
	for _, sec := range s.All {
		sec.GrantRead(role, nil)
	}
}

var notAlnum = regexp.MustCompile(`[^A-Za-z0-9]+`)

// logicalName turns OPENAI_API_KEY into OpenaiApiKey: a construct id that
// stays the same as long as the env name does.
func logicalName(env string) string {
	var b strings.Builder
	for _, part := range notAlnum.Split(env, -1) {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + strings.ToLower(part[1:]))
	}
	return b.String()
}
