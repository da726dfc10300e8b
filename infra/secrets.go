package main

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/relaybatch/relay/internal/resources"
)

// Secrets are the provider host keys, one Secrets Manager secret per
// api_key_env of the models file, and the operator webhook endpoints'
// signing secrets, one per secret_env of its operator_webhooks, each named
// SecretPrefix + the variable's name so the functions find them by name.
// The stack creates them with a random placeholder; the operator puts the
// real key or whsec_ secret (README).
type Secrets struct {
	Scope constructs.Construct
	All   []awssecretsmanager.Secret // provider keys, in models file order
	// Operator are the operator endpoints' secrets, in file order.
	Operator []awssecretsmanager.Secret
}

func NewSecrets(scope constructs.Construct, props RelayProps) *Secrets {
	c := constructs.NewConstruct(scope, jsii.String("Secrets"))
	s := &Secrets{Scope: c}
	made := map[string]awssecretsmanager.Secret{}
	secret := func(env, what string) awssecretsmanager.Secret {
		if sec, ok := made[env]; ok {
			return sec
		}
		sec := awssecretsmanager.NewSecret(c, jsii.String(resources.LogicalName(env)), &awssecretsmanager.SecretProps{
			SecretName:  jsii.String(props.SecretPrefix() + env),
			Description: jsii.String(fmt.Sprintf("%s %s %s: put the real one with `aws secretsmanager put-secret-value`", props.Prefix, what, env)),
			GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
				ExcludePunctuation: jsii.Bool(true),
			},
		})
		made[env] = sec
		return sec
	}
	seen := map[string]bool{}
	for _, m := range props.Models.Models {
		for _, env := range m.KeyEnvs() {
			if env != "" && !seen[env] {
				seen[env] = true
				s.All = append(s.All, secret(env, "provider key"))
			}
		}
	}
	seen = map[string]bool{}
	for _, w := range props.Models.OperatorWebhooks {
		if env := w.SecretEnv; !seen[env] {
			seen[env] = true
			s.Operator = append(s.Operator, secret(env, "operator webhook secret (whsec_…)"))
		}
	}
	return s
}

// GrantRead lets role read every provider key, and nothing else.
func (s *Secrets) GrantRead(role awsiam.IRole) {
	for _, sec := range s.All {
		sec.GrantRead(role, nil)
	}
}

// GrantOperatorRead lets role read the operator endpoints' secrets, and
// nothing else.
func (s *Secrets) GrantOperatorRead(role awsiam.IRole) {
	for _, sec := range s.Operator {
		sec.GrantRead(role, nil)
	}
}
