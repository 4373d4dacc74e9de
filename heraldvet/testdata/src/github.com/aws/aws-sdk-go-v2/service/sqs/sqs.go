// Package sqs is a stub of github.com/aws/aws-sdk-go-v2/service/sqs.
package sqs

import "context"

type Options struct{}

type SendMessageInput struct{ MessageBody *string }

type SendMessageOutput struct{}

type ReceiveMessageInput struct{}

type ReceiveMessageOutput struct{}

type Client struct{}

func (c *Client) SendMessage(ctx context.Context, params *SendMessageInput, optFns ...func(*Options)) (*SendMessageOutput, error) {
	return nil, nil
}
func (c *Client) ReceiveMessage(ctx context.Context, params *ReceiveMessageInput, optFns ...func(*Options)) (*ReceiveMessageOutput, error) {
	return nil, nil
}
